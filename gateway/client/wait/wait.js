// The hosted waiting page: follows one command with the browser module and says where it stands.
//
// What it needs comes in the URL's fragment, which browsers never send to a server:
//   /wait/{namespace}/{command}#token=<subject token>&key=<intent>&input=<JSON>&return=<URL>
// The token is kept in sessionStorage (as the module keeps the intent) and removed from the
// address bar at once, so a reload resumes the same command and a shared screenshot or link
// shows no token. The page's own configuration (texts, colours, allowed return URLs) is a JSON
// block the gateway renders from the declaration.

import { FINAL, createClient } from "../sluice.js";
import { about, dress, refuse, refuseStorage, when } from "../page-kit.js";

const config = JSON.parse(document.getElementById("sluice-page").textContent);
dress(config);

const $ = (id) => document.getElementById(id);

const WORDS = {
  idle: "Starting…",
  accepted: "You are in line.",
  retry_wait: "Your turn is being retried.",
  executing: "It is your turn: your request is being processed.",
  running: "It is your turn: your request is being processed.",
  recovering: "Checking your place after a lost connection…",
  error: "Reconnecting…",
  succeeded: "Done.",
  rejected: "Your request was declined.",
  failed: "Your request could not be completed.",
  expired: "Your request expired before its turn.",
  cancelled: "You left the line.",
  needs_review: "Your request is being reviewed; you will hear about it.",
};

/** What the link brought, kept in sessionStorage; throws when storage refuses. */
function fragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  const scope = `sluice:v1:wait:${config.namespace}:${config.command}`;
  const saved = JSON.parse(sessionStorage.getItem(scope) ?? "{}");
  const given = {
    token: params.get("token") ?? saved.token,
    key: params.get("key") ?? saved.key,
    input: params.has("input") ? JSON.parse(params.get("input")) : saved.input,
    returnUrl: params.get("return") ?? saved.returnUrl,
  };
  sessionStorage.setItem(scope, JSON.stringify(given));
  if (location.hash) history.replaceState(null, "", location.pathname);
  return given;
}

/** A return URL is followed only when it starts with one the declaration allows. */
function allowedReturn(url) {
  if (!url) return null;
  try {
    const parsed = new URL(url);
    const ok = config.return_urls.some((allowed) => {
      const base = new URL(allowed);
      return parsed.origin === base.origin && parsed.pathname.startsWith(base.pathname);
    });
    return ok ? parsed : null;
  } catch {
    return null;
  }
}

function show(snapshot, handle, returnUrl) {
  // A confirmed command keeps its last status while polls fail: say that we reconnect.
  const reconnecting = snapshot.error?.retryable && !FINAL.includes(snapshot.state);
  $("state").textContent = reconnecting ? WORDS.error : (WORDS[snapshot.state] ?? snapshot.state);
  const waiting = snapshot.position !== null && !FINAL.includes(snapshot.state);
  $("figures").hidden = !waiting;
  $("position").textContent = waiting ? String(snapshot.position + 1) : "—";
  $("eta").textContent = about(snapshot.etaSeconds);
  $("updated").textContent = when(snapshot.updatedAt);
  const problem = snapshot.error && (snapshot.state === "error" || FINAL.includes(snapshot.state));
  $("problem").hidden = !problem;
  $("problem").textContent = problem ? snapshot.error.message : "";
  $("leave").hidden = FINAL.includes(snapshot.state) || snapshot.state === "needs_review" || !snapshot.commandId;
  if (FINAL.includes(snapshot.state) && returnUrl) {
    returnUrl.searchParams.set("command_id", snapshot.commandId ?? "");
    returnUrl.searchParams.set("status", snapshot.state);
    const link = $("continue");
    link.href = returnUrl.toString();
    link.hidden = false;
    setTimeout(() => location.assign(returnUrl.toString()), 1500);
  }
}

function start() {
  let given;
  try {
    given = fragment();
  } catch (error) {
    refuseStorage(error);
    return;
  }
  if (!given.token || !given.key) {
    $("state").textContent = "This page needs a link from the site that sent you here.";
    return;
  }
  let client;
  try {
    client = createClient({ baseUrl: location.origin, token: given.token });
  } catch (error) {
    refuse(error.message);
    return;
  }
  const returnUrl = allowedReturn(given.returnUrl);
  const handle = client.command(config.command, { key: given.key, input: given.input });
  handle.subscribe((snapshot) => show(snapshot, handle, returnUrl));
  $("leave").addEventListener("click", async () => {
    $("leave").disabled = true;
    try {
      await handle.cancel();
    } catch (error) {
      $("problem").hidden = false;
      $("problem").textContent = error.message;
    } finally {
      $("leave").disabled = false;
    }
  });
  if (!handle.resume()) handle.start();
}

start();
