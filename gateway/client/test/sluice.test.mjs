// The client's state machine, backoff and jitter, against a scripted gateway and fake timers
// (node --test; no browser, no network). The real gateway and Chromium are in
// gateway/tests/api/browser.rs.

import { test } from "node:test";
import assert from "node:assert/strict";

import {
  ALLOCATION_STATES, FINAL, MAX_BACKOFF_MS, SluiceError, backoffMs, createClient, pollDelayMs, tokenClaims,
} from "../sluice.js";

/** A subject token whose payload names `sub` and `exp` (the client does not verify it). */
function token(sub, exp = Math.floor(Date.now() / 1000) + 3600) {
  const part = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  return `${part({ alg: "HS256", kid: "k" })}.${part({ sub, exp, iat: 0 })}.sig`;
}

class MemoryStorage {
  constructor() { this.map = new Map(); }
  getItem(k) { return this.map.has(k) ? this.map.get(k) : null; }
  setItem(k, v) { this.map.set(k, String(v)); }
  removeItem(k) { this.map.delete(k); }
}

/** Timers that run only when the test says so, earliest first. */
class Clock {
  constructor() { this.timers = []; this.next = 1; this.delays = []; }
  setTimeout = (fn, ms) => { const id = this.next++; this.timers.push({ id, fn, ms }); this.delays.push(ms); return id; };
  clearTimeout = (id) => { this.timers = this.timers.filter((t) => t.id !== id); };
  /** Runs the earliest timer and lets its promises settle; false when none is pending. */
  async tick() {
    if (this.timers.length === 0) return false;
    this.timers.sort((a, b) => a.ms - b.ms);
    const timer = this.timers.shift();
    timer.fn();
    for (let i = 0; i < 20; i += 1) await new Promise((r) => setImmediate(r));
    return true;
  }
  async drain(limit = 50) { let n = 0; while (n < limit && (await this.tick())) n += 1; return n; }
}

/** A gateway that answers each request with the next scripted answer for its route. */
function gateway(script) {
  const calls = [];
  const fetch = async (url, init) => {
    const path = new URL(url).pathname;
    const body = init.body ? JSON.parse(init.body) : null;
    calls.push({ method: init.method, path, body, headers: init.headers });
    const route = path.startsWith("/v1/tickets/") ? "poll" : path.endsWith(":enqueue") ? "enqueue" : path;
    const next = script[route]?.shift();
    if (next === undefined) throw new Error(`unscripted ${init.method} ${path}`);
    if (next instanceof Error) throw next;
    const { status, json, retryAfter } = next;
    return {
      status,
      headers: { get: (name) => (name === "retry-after" && retryAfter ? String(retryAfter) : null) },
      json: async () => json,
    };
  };
  return { fetch, calls };
}

const receipt = (status = "accepted", extra = {}) => ({
  status: 202,
  json: { data: { command_id: "c1", ticket: "t1", status, queue: { position: 3, observed_at: "x" }, poll_after_ms: 1000, ...extra } },
});
const polled = (status, extra = {}) => ({
  status: 200,
  json: { data: { command_id: "c1", status, queue: null, eta_seconds: null, poll_after_ms: 800, result: null, error: null, ...extra } },
});
const refused = (status, code, retryable, retry_after_ms) => ({
  status, json: { error: { code, message: code, retryable, retry_after_ms } },
});

function setup(script, options = {}) {
  const clock = new Clock();
  const storage = options.storage ?? new MemoryStorage();
  const gw = gateway(script);
  const client = createClient({
    baseUrl: "http://gw.test",
    token: options.token ?? token("alice"),
    storage,
    fetch: gw.fetch,
    setTimeout: clock.setTimeout,
    clearTimeout: clock.clearTimeout,
    random: () => 0.5,
    document: options.document,
  });
  return { clock, storage, gw, client };
}

test("backoff doubles to 30 s with jitter and never undercuts Retry-After", () => {
  for (let attempt = 0; attempt < 40; attempt += 1) {
    for (const r of [0, 0.5, 0.999]) {
      const wait = backoffMs(attempt, null, () => r);
      const ceiling = Math.min(MAX_BACKOFF_MS, 500 * 2 ** attempt);
      assert.ok(wait >= ceiling / 2 && wait <= ceiling, `${attempt} ${r} ${wait}`);
    }
  }
  assert.equal(backoffMs(0, 7_000, () => 0), 7_000);
  assert.equal(backoffMs(10, 90_000, () => 1), MAX_BACKOFF_MS, "capped even past Retry-After");
});

test("polls follow the advice within ±10 %, a hidden tab waits at least 30 s", () => {
  assert.equal(pollDelayMs(1000, false, () => 0), 900);
  assert.equal(pollDelayMs(1000, false, () => 1), 1100);
  assert.equal(pollDelayMs(1000, true, () => 0.5), MAX_BACKOFF_MS);
  assert.equal(pollDelayMs(undefined, false, () => 0.5), 2000);
});

test("without a working storage the client refuses to start", () => {
  assert.throws(() => createClient({ baseUrl: "http://gw", token: "t", storage: null }),
    (e) => e instanceof SluiceError && e.code === "STORAGE_UNAVAILABLE");
  const broken = { setItem() { throw new DOMException("quota", "QuotaExceededError"); }, removeItem() {}, getItem() { return null; } };
  assert.throws(() => createClient({ baseUrl: "http://gw", token: "t", storage: broken }),
    (e) => e.code === "STORAGE_UNAVAILABLE" && /QuotaExceededError/.test(e.message));
});

test("the request key is stored before the first request, and a lost answer is retried with it", async () => {
  let storedAtFirstCall = null;
  const storage = new MemoryStorage();
  const { clock, gw, client } = setup({
    enqueue: [new Error("connection reset"), receipt()],
    poll: [polled("executing"), polled("succeeded", { result: { allocation_id: "a" } })],
  }, { storage });
  const handle = client.command("claim", { key: "offer-1", input: { offer: "o" } });
  const states = [];
  handle.subscribe((s) => states.push(s.state));
  handle.start();
  storedAtFirstCall = [...storage.map.values()].find((v) => v.includes("requestKey"));
  assert.ok(storedAtFirstCall, "stored before any timer ran");
  await clock.drain();
  const enqueues = gw.calls.filter((c) => c.path.endsWith(":enqueue"));
  assert.equal(enqueues.length, 2);
  assert.equal(enqueues[0].body.request_key, enqueues[1].body.request_key, "the same key");
  assert.equal(enqueues[0].body.request_key, JSON.parse(storedAtFirstCall).requestKey);
  assert.equal(handle.state, "succeeded");
  assert.deepEqual(handle.snapshot.result, { allocation_id: "a" });
  assert.ok(states.includes("error") && states.includes("recovering"), states.join(","));
  assert.equal(clock.timers.length, 0, "a final status stops polling");
  const polls = gw.calls.filter((c) => c.path.startsWith("/v1/tickets/"));
  assert.ok(polls.every((c) => !c.headers.authorization), "polls send the ticket only");
});

test("a reload resumes the stored intent: the same command, no second enqueue", async () => {
  const storage = new MemoryStorage();
  const first = setup({ enqueue: [receipt()], poll: [polled("accepted")] }, { storage });
  first.client.command("claim", { key: "offer-1", input: { offer: "o" } }).start();
  await first.clock.tick();
  // The page reloads: a new client over the same storage.
  const second = setup({ poll: [polled("running"), polled("succeeded")] }, { storage });
  const handle = second.client.command("claim", { key: "offer-1" });
  assert.equal(handle.state, "accepted", "the stored status is shown at once");
  assert.equal(handle.resume(), true);
  await second.clock.drain();
  assert.equal(second.gw.calls.filter((c) => c.path.endsWith(":enqueue")).length, 0);
  assert.equal(handle.state, "succeeded");
  // start() on a stored intent continues it too, never a second one.
  const third = setup({}, { storage });
  const again = third.client.command("claim", { key: "offer-1", input: { offer: "o" } });
  again.start();
  await third.clock.drain();
  assert.equal(third.gw.calls.length, 0, "a final intent is shown, not sent again");
  assert.equal(again.state, "succeeded");
});

test("503 and 429 back off, never earlier than Retry-After, then recover", async () => {
  const { clock, client } = setup({
    enqueue: [refused(503, "UNAVAILABLE", true, 4_000), refused(429, "RATE_LIMITED", true, 1_500), receipt()],
    poll: [polled("succeeded")],
  });
  const handle = client.command("claim", { key: "k", input: {} });
  handle.start();
  await clock.drain();
  assert.equal(handle.state, "succeeded");
  assert.ok(clock.delays.includes(4_000), clock.delays.join(","));
  assert.ok(clock.delays.includes(1_500), clock.delays.join(","));
});

test("polls honour poll_after_ms; a hidden tab polls at most every 30 s and catches up when shown", async () => {
  const listeners = {};
  const document = {
    visibilityState: "visible",
    addEventListener: (name, fn) => { listeners[name] = fn; },
    removeEventListener: () => {},
  };
  const { clock, client } = setup({
    enqueue: [receipt()], poll: [polled("accepted"), polled("accepted"), polled("succeeded")],
  }, { document });
  const handle = client.command("claim", { key: "k", input: {} });
  handle.start();
  await clock.tick(); // enqueue
  assert.equal(clock.timers[0].ms, 1000, "the receipt's poll_after_ms (jitter at its middle)");
  await clock.tick(); // first poll
  assert.equal(clock.timers[0].ms, 800);
  document.visibilityState = "hidden";
  await clock.tick(); // second poll, now hidden
  assert.equal(clock.timers[0].ms, MAX_BACKOFF_MS);
  document.visibilityState = "visible";
  listeners.visibilitychange();
  assert.equal(clock.timers[0].ms, 0, "visible again: poll at once");
  await clock.drain();
  assert.equal(handle.state, "succeeded");
});

test("a refusal for good is an error that is not retried, and only then may the intent be cleared", async () => {
  const { clock, gw, client } = setup({ enqueue: [refused(400, "INVALID_ARGUMENT", false)] });
  const handle = client.command("claim", { key: "k", input: { offer: 1 } });
  handle.start();
  await clock.drain();
  assert.equal(handle.state, "error");
  assert.equal(handle.snapshot.error.code, "INVALID_ARGUMENT");
  assert.equal(gw.calls.length, 1, "not retried");
  handle.clear();
  assert.equal(handle.state, "idle");
});

test("clear() refuses while the command may still run; cancel() asks the gateway", async () => {
  const { clock, client } = setup({
    enqueue: [receipt()],
    poll: [polled("accepted")],
    "/v1/commands/c1:cancel": [{ status: 200, json: { data: { command_id: "c1", status: "cancelled" } } }],
  });
  const handle = client.command("claim", { key: "k", input: {} });
  handle.start();
  await clock.tick();
  assert.throws(() => handle.clear(), (e) => e.code === "STATE_CONFLICT");
  await handle.cancel();
  assert.equal(handle.state, "cancelled");
  assert.ok(FINAL.includes(handle.state));
  assert.equal(clock.timers.length, 0);
  handle.clear();
});

test("a token function is asked again on 401, and a new subject stops the commands", async () => {
  let issued = 0;
  const subjects = ["alice", "alice", "bob"];
  const { clock, client } = setup({
    enqueue: [refused(401, "UNAUTHENTICATED", false), receipt()],
    poll: [polled("accepted")],
    "/v1/reads/offer": [refused(401, "UNAUTHENTICATED", false)],
  }, { token: async () => token(subjects[issued++]) });
  const handle = client.command("claim", { key: "k", input: {} });
  handle.start();
  await clock.tick();
  assert.equal(issued, 2, "refreshed after the 401");
  assert.equal(handle.state, "accepted");
  // The next refresh names Bob: Alice's command stops where it is, and says why.
  await assert.rejects(client.read("offer", { id: "1" }), (e) => e.code === "SUBJECT_CHANGED");
  assert.equal(handle.state, "error");
  assert.equal(handle.snapshot.error.code, "SUBJECT_CHANGED");
  assert.equal(clock.timers.length, 0, "nothing polls for Alice any more");
  assert.equal(tokenClaims(token("x")).sub, "x");
});

const ALLOCATION = "0b0c8f5e-3c1d-4c4e-9d7e-2f7a1b6c9d10";

/** Lets `promise`'s pending requests run and fires its timers (backoffs) until it settles. */
async function settle(clock, promise) {
  let done = false;
  promise.then(() => { done = true; }, () => { done = true; });
  for (let i = 0; i < 50 && !done; i += 1) {
    for (let j = 0; j < 20 && !done; j += 1) await new Promise((r) => setImmediate(r));
    if (!done) await clock.tick();
  }
  return promise;
}
const allocation = (state, extra = {}) => ({
  status: 200,
  json: { data: { allocation_id: ALLOCATION, pool: "seats", subject: "alice", command_id: "c1", state,
    created_at: "t0", updated_at: "t1", ...extra } },
});
const conflict = (state) => ({
  status: 409,
  json: { error: { code: "STATE_CONFLICT", message: `the allocation is ${state}`, retryable: false, details: { state } } },
});

test("allocation(), confirm() and release() send the subject token and answer the allocation", async () => {
  const alice = token("alice");
  const { gw, client } = setup({
    [`/v1/allocations/${ALLOCATION}`]: [allocation("reserved", { expires_at: "t2" })],
    [`/v1/allocations/${ALLOCATION}:confirm`]: [allocation("confirmed", { changed: true })],
    [`/v1/allocations/${ALLOCATION}:release`]: [allocation("released", { changed: false })],
  }, { token: alice });
  const held = await client.allocation(ALLOCATION);
  assert.equal(held.state, "reserved");
  assert.equal(held.expires_at, "t2");
  const confirmed = await client.confirm(ALLOCATION);
  assert.deepEqual([confirmed.state, confirmed.changed], ["confirmed", true]);
  const released = await client.release(ALLOCATION);
  assert.deepEqual([released.state, released.changed], ["released", false]);
  assert.deepEqual(gw.calls.map((c) => [c.method, c.path]), [
    ["GET", `/v1/allocations/${ALLOCATION}`],
    ["POST", `/v1/allocations/${ALLOCATION}:confirm`],
    ["POST", `/v1/allocations/${ALLOCATION}:release`],
  ]);
  for (const c of gw.calls) {
    assert.equal(c.headers.authorization, `Bearer ${alice}`, "the holder's subject token");
    assert.equal(c.body, null, "confirm and release send no body");
    assert.equal(c.headers["content-type"], undefined);
  }
  assert.deepEqual([...ALLOCATION_STATES], ["reserved", "confirmed", "released", "expired"]);
});

test("a decided or expired allocation is a STATE_CONFLICT error carrying its state, not retried", async () => {
  const { gw, client } = setup({
    [`/v1/allocations/${ALLOCATION}:confirm`]: [conflict("expired")],
    [`/v1/allocations/${ALLOCATION}:release`]: [conflict("confirmed")],
  });
  await assert.rejects(client.confirm(ALLOCATION), (e) => e instanceof SluiceError
    && e.code === "STATE_CONFLICT" && e.status === 409 && e.details?.state === "expired" && !e.retryable);
  await assert.rejects(client.release(ALLOCATION), (e) => e.code === "STATE_CONFLICT"
    && e.details.state === "confirmed");
  assert.equal(gw.calls.length, 2, "a conflict is an answer, never asked again");
});

test("a confirm whose answer was lost or refused for now is asked again, never earlier than Retry-After", async () => {
  const { clock, gw, client } = setup({
    [`/v1/allocations/${ALLOCATION}:confirm`]: [
      new Error("connection reset"), refused(503, "UNAVAILABLE", true, 4_000), allocation("confirmed", { changed: false }),
    ],
  });
  const confirmed = await settle(clock, client.confirm(ALLOCATION));
  assert.deepEqual([confirmed.state, confirmed.changed], ["confirmed", false], "the repeat found it confirmed");
  assert.equal(gw.calls.length, 3);
  assert.ok(clock.delays.includes(4_000), clock.delays.join(","));
});

test("allocation calls give up after four attempts, and refuse an id that is no allocation's before asking", async () => {
  const lost = () => new Error("offline");
  const { clock, gw, client } = setup({
    [`/v1/allocations/${ALLOCATION}`]: [lost(), lost(), lost(), lost()],
    [`/v1/allocations/${ALLOCATION}:release`]: [refused(403, "PERMISSION_DENIED", false)],
  });
  await assert.rejects(settle(clock, client.allocation(ALLOCATION)), (e) => e.code === "NETWORK" && e.retryable);
  assert.equal(gw.calls.length, 4);
  await assert.rejects(client.release(ALLOCATION), (e) => e.code === "PERMISSION_DENIED" && e.status === 403);
  assert.equal(gw.calls.length, 5, "a refusal for good is not asked again");
  for (const id of ["", "a1", `${ALLOCATION}:release`, "../status", null]) {
    await assert.rejects(client.confirm(id), (e) => e.code === "INVALID_ARGUMENT", String(id));
  }
  assert.equal(gw.calls.length, 5, "nothing sent for a malformed id");
});

test("the snapshot is one frozen object per change: the same on every read until the state moves", async () => {
  const { clock, client } = setup({
    enqueue: [receipt()],
    poll: [polled("accepted", { queue: { position: 3, observed_at: "x" } }), polled("succeeded", { result: { n: 1 } })],
  });
  const handle = client.command("claim", { key: "k", input: {} });
  const idle = handle.snapshot;
  assert.equal(handle.snapshot, idle, "two reads without a change: the same object");
  assert.ok(Object.isFrozen(idle), "frozen: a reader cannot change what another reader sees");
  const seen = [];
  handle.subscribe((s) => seen.push(s));
  assert.equal(seen[0], idle, "a subscriber is handed the same object a read returns");
  handle.start();
  await clock.tick(); // the enqueue: accepted, position 3
  const accepted = handle.snapshot;
  assert.notEqual(accepted, idle, "a change is a new object");
  assert.equal(accepted.state, "accepted");
  assert.equal(idle.state, "idle", "the old snapshot keeps what it said");
  assert.equal(handle.snapshot, accepted);
  assert.equal(seen.at(-1), accepted);
  const notified = seen.length;
  await clock.tick(); // a poll that says the same: no new object, no listener call
  assert.equal(handle.snapshot, accepted, "an answer that changes nothing keeps the object");
  assert.equal(seen.length, notified, "and calls no listener");
  await clock.tick(); // succeeded
  const done = handle.snapshot;
  assert.notEqual(done, accepted);
  assert.deepEqual(done.result, { n: 1 });
  assert.equal(handle.snapshot, done);
  assert.ok(Object.isFrozen(done));
  assert.equal(new Set(seen).size, seen.length, "each listener call is handed a new snapshot");
});

test("start(input) creates the intent from that input; a stored intent keeps its own", async () => {
  const storage = new MemoryStorage();
  const first = setup({ enqueue: [receipt()] }, { storage });
  const handle = first.client.command("claim", { key: "k" });
  assert.throws(() => handle.start(), (e) => e.code === "INVALID_ARGUMENT", "no input anywhere");
  handle.start({ offer: "late" });
  await first.clock.tick();
  assert.deepEqual(first.gw.calls[0].body.input, { offer: "late" });
  // After a reload, start() with another input continues the stored intent, never a new one.
  const second = setup({ poll: [polled("accepted")] }, { storage });
  second.client.command("claim", { key: "k" }).start({ offer: "other" });
  await second.clock.tick();
  assert.deepEqual(second.gw.calls.map((c) => c.path), ["/v1/tickets/t1"]);
});
