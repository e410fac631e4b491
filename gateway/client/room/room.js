// The hosted room page: one person's place in a waiting room, through the browser module's
// room handle (the door's proof of work in a worker, the join, polls, heartbeats).
//
// The subject token comes in the URL's fragment, which browsers never send to a server:
//   /room/{namespace}/{room}#token=<subject token>
// It is kept in sessionStorage and removed from the address bar at once, so a reload keeps the
// place (the module stores the place's ticket per subject) and a shared link shows no token. A
// new token in the fragment replaces the stored one: the place is then that subject's.
//
// On admission the pass goes to the protected origin as an HTML form post to the declared
// `return_url` (fields `pass`, `join_id`, `room`): the origin's server receives it directly,
// verifies it and opens its own session, and the pass never sits in a URL (history, logs,
// Referer headers) nor needs script on the origin's page. No return URL declared: the page
// shows that the person is in, and keeps the pass alive while it is open.

import { PLACE_FINAL, createClient } from "../rooms.js";
import { about, dress, refuse, refuseStorage, when } from "../page-kit.js";

const config = JSON.parse(document.getElementById("sluice-page").textContent);
dress(config);

const $ = (id) => document.getElementById(id);

const WORDS = {
  idle: "Starting…",
  joining: "Taking your place…",
  solving: "Checking your browser before you join…",
  waiting: "You are in line.",
  admitted: "It is your turn.",
  left: "You left the line.",
  expired: "Your turn has passed. Reload the page to join again.",
  error: "Reconnecting…",
};

/** The token the link brought (or the one kept for this tab); throws when storage refuses. */
function token() {
  const params = new URLSearchParams(location.hash.slice(1));
  const scope = `sluice:v1:room-page:${config.namespace}:${config.room}`;
  const given = params.get("token") ?? sessionStorage.getItem(scope);
  if (given) sessionStorage.setItem(scope, given);
  if (location.hash) history.replaceState(null, "", location.pathname);
  return given;
}

/** `h:mm:ss` (or `m:ss`) until `iso`, from this browser's clock. */
function countdown(iso) {
  const left = Math.max(0, Math.ceil((new Date(iso).getTime() - Date.now()) / 1000));
  const h = Math.floor(left / 3600);
  const m = Math.floor((left % 3600) / 60);
  const s = String(left % 60).padStart(2, "0");
  return h > 0 ? `${h}:${String(m).padStart(2, "0")}:${s}` : `${m}:${s}`;
}

let handedOff = false;
let last = null;

function show(snapshot) {
  last = snapshot;
  const retrying = snapshot.state === "error" && snapshot.error?.retryable !== false;
  $("state").textContent = retrying ? WORDS.error : (WORDS[snapshot.state] ?? snapshot.state);
  const waiting = snapshot.state === "waiting";
  const before = waiting && snapshot.position === null && snapshot.opensAt !== null;
  $("figures").hidden = !waiting || before;
  $("countdown").hidden = !before;
  $("position").textContent = waiting && snapshot.position !== null ? String(snapshot.position + 1) : "—";
  $("eta").textContent = about(snapshot.etaSeconds);
  $("updated").textContent = when(snapshot.updatedAt);
  $("opens-at").textContent = when(snapshot.opensAt);
  if (before) $("opens-in").textContent = countdown(snapshot.opensAt);
  $("work").hidden = snapshot.state !== "solving";
  $("work").textContent = snapshot.work ? `${snapshot.work.hashes.toLocaleString()} tries so far` : "";
  const problem = snapshot.error && !retrying;
  $("problem").hidden = !problem;
  $("problem").textContent = problem ? snapshot.error.message : "";
  $("leave").hidden = !(waiting || snapshot.state === "admitted");
  if (snapshot.state === "admitted" && snapshot.pass) handOff(snapshot);
}

/** Posts the pass to the declared return URL (once, after a moment to read the page). */
function handOff(snapshot) {
  if (!config.return_url) return;
  const form = $("handoff");
  form.action = config.return_url;
  $("handoff-pass").value = snapshot.pass;
  $("handoff-join").value = snapshot.joinId ?? "";
  $("handoff-room").value = config.room;
  form.hidden = false;
  if (handedOff) return;
  handedOff = true;
  setTimeout(() => form.submit(), 1500);
}

function start() {
  let given;
  try {
    given = token();
  } catch (error) {
    refuseStorage(error);
    return;
  }
  if (!given) {
    $("state").textContent = "This page needs a link from the site that sent you here.";
    return;
  }
  let handle;
  try {
    handle = createClient({ baseUrl: location.origin, token: given }).room(config.room);
  } catch (error) {
    refuse(error.message);
    return;
  }
  handle.subscribe(show);
  // The countdown moves every second without a poll.
  setInterval(() => {
    if (last?.state === "waiting" && last.position === null && last.opensAt) {
      $("opens-in").textContent = countdown(last.opensAt);
    }
  }, 1000);
  $("leave").addEventListener("click", async () => {
    $("leave").disabled = true;
    try {
      await handle.leave();
    } catch (error) {
      $("problem").hidden = false;
      $("problem").textContent = error.message;
    } finally {
      $("leave").disabled = false;
    }
  });
  // A place that ended (left, expired) before this load is forgotten: a reload joins again.
  if (PLACE_FINAL.includes(handle.state)) handle.clear();
  if (!handle.resume()) handle.start();
}

start();
