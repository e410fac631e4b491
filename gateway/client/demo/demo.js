// sluice dev's demo sale: one buyer's claim through the browser module, beside a crowd.
//
// `/demo/token?subject=…` (served by `sluice dev` only) mints the subject token a real
// application's backend would mint; the crowd enqueues with tokens of their own, so the buyer
// waits in a real queue.

import { FINAL, createClient } from "/sdk/v1/sluice.js";

const OFFER = "0b0c8f5e-3c1d-4c4e-9d7e-2f7a1b6c9d10";
const $ = (id) => document.getElementById(id);

async function tokenFor(subject) {
  const answer = await fetch(`/demo/token?subject=${encodeURIComponent(subject)}`, { cache: "no-store" });
  if (!answer.ok) throw new Error(`the dev stack refused a token (${answer.status})`);
  return (await answer.json()).token;
}

function buyer() {
  let subject = sessionStorage.getItem("sluice-demo-buyer");
  if (!subject) {
    subject = `buyer-${crypto.randomUUID().slice(0, 8)}`;
    sessionStorage.setItem("sluice-demo-buyer", subject);
  }
  return subject;
}

/** Other buyers: each enqueues once with its own token (no polling, they only stand in line). */
async function crowd(count) {
  const jobs = [];
  for (let i = 0; i < count; i += 1) {
    jobs.push((async () => {
      const token = await tokenFor(`crowd-${crypto.randomUUID().slice(0, 8)}`);
      await fetch("/v1/commands/claim:enqueue", {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ request_key: crypto.randomUUID(), input: { offer: OFFER } }),
      });
    })().catch(() => {}));
  }
  await Promise.all(jobs);
}

function show(snapshot) {
  const words = {
    accepted: "In line.", executing: "Your turn: allocating…", running: "Your turn: allocating…",
    recovering: "Checking your claim after a lost connection…", error: "Reconnecting…",
  };
  $("state").textContent = words[snapshot.state] ?? `Status: ${snapshot.state}`;
  const waiting = snapshot.position !== null && !FINAL.includes(snapshot.state);
  $("figures").hidden = !waiting;
  $("position").textContent = waiting ? String(snapshot.position + 1) : "—";
  $("eta").textContent = snapshot.etaSeconds === null ? "—" : `${snapshot.etaSeconds} s`;
  if (snapshot.state === "succeeded") {
    $("outcome").textContent = `You got a unit (allocation ${snapshot.result?.allocation_id ?? "?"}).`;
  } else if (snapshot.state === "rejected") {
    $("outcome").textContent = `No unit for you: ${snapshot.error?.code ?? "rejected"}.`;
  } else {
    $("outcome").textContent = "";
  }
  $("again").hidden = !FINAL.includes(snapshot.state);
}

async function main() {
  const subject = buyer();
  const client = createClient({ baseUrl: location.origin, token: () => tokenFor(subject) });
  const handle = client.command("claim", { key: `demo-${OFFER}`, input: { offer: OFFER } });
  handle.subscribe(show);
  const hosted = async () => {
    const token = await tokenFor(subject);
    const hash = new URLSearchParams({ token, key: `hosted-${OFFER}`, input: JSON.stringify({ offer: OFFER }) });
    const namespace = (await (await fetch("/demo/namespace", { cache: "no-store" })).json()).namespace_id;
    $("hosted").href = `/wait/${namespace}/claim#${hash}`;
    $("hosted").hidden = false;
  };
  hosted().catch(() => {});
  if (handle.resume()) $("claim").hidden = true;
  $("claim").addEventListener("click", async () => {
    $("claim").hidden = true;
    $("state").textContent = "Other buyers arrive…";
    await crowd(Number($("buyers").value) || 0);
    handle.start();
  });
  $("again").addEventListener("click", () => {
    handle.clear();
    sessionStorage.removeItem("sluice-demo-buyer");
    location.reload();
  });
}

main();
