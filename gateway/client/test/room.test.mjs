// A room's handle against a scripted gateway and fake timers (node --test): the door's proof of
// work, the join, the polls, the heartbeats and leaving; a reload that resumes the same place;
// a stale challenge asked again once. Node has no Web Worker, so the solve runs on the main
// thread here, except where a test hands the client a worker; the real Worker is in Chromium
// (gateway/tests/api/rooms/browser.rs).

import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";

import { PLACE_FINAL, SluiceError, createClient, room as roomOf, workerSource } from "../rooms.js";
import { createClient as createCommandClient } from "../sluice.js";

function token(sub) {
  const part = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  return `${part({ alg: "HS256", kid: "k" })}.${part({ sub, exp: Math.floor(Date.now() / 1000) + 3600 })}.sig`;
}

class MemoryStorage {
  constructor() { this.map = new Map(); }
  getItem(k) { return this.map.has(k) ? this.map.get(k) : null; }
  setItem(k, v) { this.map.set(k, String(v)); }
  removeItem(k) { this.map.delete(k); }
}

/** Timers that run only when the test says so, shortest delay first. */
class Clock {
  constructor() { this.timers = []; this.next = 1; this.delays = []; }
  setTimeout = (fn, ms) => { const id = this.next++; this.timers.push({ id, fn, ms }); this.delays.push(ms); return id; };
  clearTimeout = (id) => { this.timers = this.timers.filter((t) => t.id !== id); };
  async tick() {
    if (this.timers.length === 0) return false;
    this.timers.sort((a, b) => a.ms - b.ms);
    this.timers.shift().fn();
    for (let i = 0; i < 20; i += 1) await new Promise((r) => setImmediate(r));
    return true;
  }
  async drain(limit = 50) { let n = 0; while (n < limit && (await this.tick())) n += 1; return n; }
}

/** A gateway answering each route with its next scripted answer (a function gets the body). */
function gateway(script) {
  const calls = [];
  const fetch = async (url, init) => {
    const path = new URL(url).pathname;
    const body = init.body ? JSON.parse(init.body) : null;
    calls.push({ method: init.method, path, body, headers: init.headers });
    const route = path.startsWith("/v1/tickets/") ? "poll" : path.split(":").pop();
    let next = script[route]?.shift();
    if (typeof next === "function") next = next(body);
    if (next === undefined) throw new Error(`unscripted ${init.method} ${path}`);
    if (next instanceof Error) throw next;
    return { status: next.status, headers: { get: () => null }, json: async () => next.json };
  };
  return { fetch, calls, routes: () => calls.map((c) => (c.path.startsWith("/v1/tickets/") ? "poll" : c.path.split(":").pop())) };
}

const CHALLENGE = "Q".repeat(122);
const FAR = new Date(Date.now() + 600_000).toISOString();
const challenge = (text = CHALLENGE, bits = 8) => ({
  status: 200,
  json: { data: { room: "doors", required: true, challenge: text, bits, algorithm: "sha256-leading-zero-bits", expires_at: FAR, joins_per_second: null } },
});
const place = (status, extra = {}) => ({
  join_id: "j1", room: "doors", status, prequeue: false,
  queue: status === "waiting" ? { position: 4, observed_at: "2026-01-01T00:00:00Z" } : null,
  opens_at: null, eta_seconds: status === "waiting" ? 12 : null, poll_after_ms: status === "waiting" ? 1000 : null,
  pass: null, pass_expires_at: null, heartbeat_after_ms: null, joined_at: "2026-01-01T00:00:00Z", ...extra,
});
const joined = (status = "waiting", code = 202) => ({ status: code, json: { data: { ...place(status), ticket: "T1", deduplicated: code === 200 } } });
const polled = (status, extra) => ({ status: 200, json: { data: place(status, extra) } });
const admitted = (pass) => ({ pass, pass_expires_at: FAR, heartbeat_after_ms: 10_000 });
const forbidden = (reason) => ({ status: 403, json: { error: { code: "PERMISSION_DENIED", message: reason, retryable: false, details: { reason } } } });

function setup(script, options = {}) {
  const clock = new Clock();
  const storage = options.storage ?? new MemoryStorage();
  const gw = gateway(script);
  const client = createClient({
    baseUrl: "http://gw.test", token: token("alice"), storage, fetch: gw.fetch,
    setTimeout: clock.setTimeout, clearTimeout: clock.clearTimeout, random: () => 0.5,
    Worker: options.Worker ?? null, location: options.location,
  });
  return { clock, storage, gw, client };
}

function solves(text, nonce, bits) {
  const digest = createHash("sha256").update(`${text}:${nonce}`, "ascii").digest();
  const word = digest.readUInt32BE(0);
  return bits === 0 || word >>> (32 - bits) === 0;
}

test("challenge, solve, join, poll, admitted, heartbeat and leave, in that order", async () => {
  const { clock, gw, client, storage } = setup({
    challenge: [challenge()],
    join: [joined()],
    poll: [polled("waiting"), polled("admitted", admitted("P1"))],
    heartbeat: [(body) => ({ status: 200, json: { data: { ...place("admitted", admitted(`${body.pass}+`)), extended: true } } })],
    leave: [{ status: 200, json: { data: { join_id: "j1", room: "doors", status: "left", changed: true } } }],
  });
  const room = client.room("doors");
  const states = [];
  room.subscribe((s) => { if (states.at(-1) !== s.state) states.push(s.state); });
  room.start();
  await clock.drain(4);
  assert.deepEqual(gw.routes(), ["challenge", "join", "poll", "poll", "heartbeat"]);
  assert.deepEqual(states, ["idle", "joining", "solving", "joining", "waiting", "admitted"]);
  const proof = gw.calls[1].body.proof_of_work;
  assert.equal(proof.challenge, CHALLENGE);
  assert.ok(solves(CHALLENGE, proof.nonce, 8), `nonce ${proof.nonce} does not solve 8 bits`);
  const { work } = room.snapshot;
  assert.equal(work.bits, 8);
  assert.equal(work.solver, "main-thread", "node has no Worker");
  assert.ok(work.hashes >= 1 && Number.isFinite(work.ms), JSON.stringify(work));
  assert.deepEqual(gw.calls[4].body, { pass: "P1" }, "the heartbeat carries the pass");
  assert.equal(room.pass, "P1+", "the heartbeat's pass replaces the old one");
  assert.equal(room.passExpiresAt, FAR);
  assert.equal(clock.delays.at(-1), 10_000, "the next heartbeat at heartbeat_after_ms");
  const left = await room.leave();
  assert.equal(left.state, "left");
  assert.deepEqual(gw.calls.at(-1).body, { pass: "P1+" }, "an admitted place leaves with its pass");
  assert.equal(room.pass, null);
  assert.equal(clock.timers.length, 0, "nothing scheduled after leaving");
  assert.ok(PLACE_FINAL.includes(JSON.parse([...storage.map.values()][0]).status));
});

test("while waiting, a place polls as advised and leaves with its ticket", async () => {
  const { clock, gw, client } = setup({
    challenge: [challenge()],
    join: [joined()],
    poll: [polled("waiting", { poll_after_ms: 3000 })],
    leave: [{ status: 200, json: { data: { join_id: "j1", room: "doors", status: "left", changed: true } } }],
  });
  const room = client.room("doors");
  room.start();
  await clock.drain(2);
  const { state, position, etaSeconds } = room.snapshot;
  assert.deepEqual({ state, position, etaSeconds }, { state: "waiting", position: 4, etaSeconds: 12 });
  assert.equal(clock.delays.at(-1), 3000, "the advice, jitter at its middle");
  await room.leave();
  assert.deepEqual(gw.calls.at(-1).body, { ticket: "T1" });
});

test("a reload polls the stored place: no second challenge, solve or join", async () => {
  const storage = new MemoryStorage();
  const first = setup({ challenge: [challenge()], join: [joined()], poll: [polled("waiting")] }, { storage });
  first.client.room("doors").start();
  await first.clock.drain(2);
  assert.deepEqual(first.gw.routes(), ["challenge", "join", "poll"]);

  const second = setup({ poll: [polled("waiting"), polled("admitted", admitted("P9"))] }, { storage });
  const room = second.client.room("doors");
  assert.equal(room.state, "waiting", "the stored status shows before the first poll");
  assert.equal(room.snapshot.work.bits, 8, "and the solve that bought the place");
  room.start();
  await second.clock.drain(2);
  assert.deepEqual(second.gw.routes(), ["poll", "poll"], "the reload only polls");
  assert.equal(second.gw.calls[0].path, "/v1/tickets/T1");
  assert.equal(room.pass, "P9");
});

test("a solution found before a reload is sent by the next page, not solved again", async () => {
  const storage = new MemoryStorage();
  // The join's answer is lost; the page reloads before the retry.
  const first = setup({ challenge: [challenge()], join: [new TypeError("network")] }, { storage });
  first.client.room("doors").start();
  await first.clock.drain(1);
  const sent = first.gw.calls[1].body;
  first.client.room("doors").stop();
  const second = setup({ join: [joined("waiting", 200)], poll: [polled("waiting")] }, { storage });
  second.client.room("doors").start();
  await second.clock.drain(2);
  assert.deepEqual(second.gw.routes(), ["join", "poll"]);
  assert.deepEqual(second.gw.calls[0].body, sent, "the same solution: the place it bought is answered");
});

test("403 challenge_expired asks for a new challenge once, and twice is an error", async () => {
  const renewed = setup({
    challenge: [challenge(), challenge("R".repeat(122))],
    join: [forbidden("challenge_expired"), joined()],
    poll: [polled("waiting")],
  });
  const room = renewed.client.room("doors");
  room.start();
  await renewed.clock.drain(3);
  assert.deepEqual(renewed.gw.routes(), ["challenge", "join", "challenge", "join", "poll"]);
  const proof = renewed.gw.calls[3].body.proof_of_work;
  assert.equal(proof.challenge, "R".repeat(122), "the second join carries the new challenge");
  assert.ok(solves(proof.challenge, proof.nonce, 8));
  assert.equal(room.state, "waiting");

  const twice = setup({
    challenge: [challenge(), challenge()],
    join: [forbidden("challenge_used"), forbidden("challenge_used")],
  });
  const refused = twice.client.room("doors");
  refused.start();
  await twice.clock.drain(6);
  assert.deepEqual(twice.gw.routes(), ["challenge", "join", "challenge", "join"]);
  assert.equal(refused.state, "error");
  assert.equal(refused.snapshot.error.details.reason, "challenge_used");
  assert.equal(refused.snapshot.error.retryable, false);
  refused.clear();
  assert.equal(refused.state, "idle", "a refused join can be forgotten and tried again");
});

test("a 503 at the door backs off, never earlier than Retry-After, and keeps the solution", async () => {
  const { clock, gw, client } = setup({
    challenge: [challenge()],
    join: [{ status: 503, json: { error: { code: "INTAKE_PAUSED", message: "paused", retryable: true, retry_after_ms: 4000 } } }, joined()],
    poll: [polled("waiting")],
  });
  const room = client.room("doors");
  room.start();
  await clock.drain(1);
  assert.equal(room.state, "error");
  assert.equal(room.snapshot.error.code, "INTAKE_PAUSED");
  assert.ok(clock.delays.at(-1) >= 4000, `waited ${clock.delays.at(-1)} ms`);
  await clock.drain(2);
  assert.deepEqual(gw.routes(), ["challenge", "join", "join", "poll"], "one solve for both joins");
  assert.deepEqual(gw.calls[1].body, gw.calls[2].body);
});

test("a join whose answer was lost is sent again with its key, and a new join has a new key", async () => {
  const open = { status: 200, json: { data: { room: "doors", required: false, challenge: null, bits: 0, algorithm: "sha256-leading-zero-bits", expires_at: null, joins_per_second: null } } };
  const { clock, gw, client } = setup({
    challenge: [open, open],
    join: [new TypeError("network down"), joined("left", 200), joined()],
    poll: [polled("waiting")],
  });
  const room = client.room("doors");
  room.start();
  await clock.drain(2);
  assert.deepEqual(gw.routes(), ["challenge", "join", "join"]);
  const key = gw.calls[1].headers["idempotency-key"];
  assert.match(key ?? "", /^k-[0-9a-f-]{32,36}$/, "the join carries a key");
  assert.equal(gw.calls[2].headers["idempotency-key"], key, "the retry carries the same key");
  assert.equal(room.state, "left", "the retry is answered the place the first attempt made");
  room.clear();
  room.start();
  await clock.drain(2);
  assert.deepEqual(gw.routes().slice(3), ["challenge", "join", "poll"]);
  const again = gw.calls[4];
  assert.notEqual(again.headers["idempotency-key"], key, "joining anew is a new join");
});

test("a room without proof of work joins with an empty body", async () => {
  const { clock, gw, client } = setup({
    challenge: [{ status: 200, json: { data: { room: "doors", required: false, challenge: null, bits: 0, algorithm: "sha256-leading-zero-bits", expires_at: null, joins_per_second: null } } }],
    join: [joined()],
    poll: [polled("waiting")],
  });
  const room = client.room("doors");
  room.start();
  await clock.drain(2);
  assert.equal(gw.calls[1].body, null);
  assert.equal(room.snapshot.work, null, "nothing was solved");
});

test("a heartbeat refused because the pass lapsed ends the place", async () => {
  const { clock, client } = setup({
    challenge: [challenge()],
    join: [joined("admitted")],
    poll: [polled("admitted", admitted("P1"))],
    heartbeat: [{ status: 409, json: { error: { code: "STATE_CONFLICT", message: "lapsed", retryable: false, details: { state: "expired" } } } }],
  });
  const room = client.room("doors");
  room.start();
  await clock.drain(6);
  assert.equal(room.state, "expired");
  assert.equal(room.pass, null);
  assert.equal(clock.timers.length, 0);
});

test("the solve runs in a Blob-URL worker on another origin, and on the main thread when none starts", async () => {
  const created = [];
  /** A worker that runs the real Blob source in-process, messages delivered asynchronously. */
  class FakeWorker {
    constructor(url, options) {
      created.push({ url: String(url), options });
      const scope = { postMessage: (data) => setImmediate(() => this.onmessage?.({ data })) };
      new Function("self", workerSource())(scope);
      this._scope = scope;
    }
    postMessage(data) { setImmediate(() => this._scope.onmessage({ data })); }
    terminate() { this.terminated = true; }
  }
  const inWorker = setup({ challenge: [challenge()], join: [joined()], poll: [polled("waiting")] },
    { Worker: FakeWorker, location: { origin: "http://app.test" } });
  const room = inWorker.client.room("doors");
  room.start();
  await inWorker.clock.drain(2);
  assert.equal(room.snapshot.work.solver, "worker-blob");
  assert.equal(created.length, 1);
  assert.match(created[0].url, /^blob:/);
  assert.ok(solves(CHALLENGE, inWorker.gw.calls[1].body.proof_of_work.nonce, 8));

  class ForbiddenWorker { constructor() { throw new DOMException("blocked by CSP", "SecurityError"); } }
  const fallback = setup({ challenge: [challenge()], join: [joined()], poll: [polled("waiting")] },
    { Worker: ForbiddenWorker, location: { origin: "http://app.test" } });
  const mainRoom = fallback.client.room("doors");
  mainRoom.start();
  await fallback.clock.drain(2);
  assert.equal(mainRoom.snapshot.work.solver, "main-thread");
  assert.equal(mainRoom.state, "waiting");
});

test("stop() during a solve abandons it, and room codes are checked", async () => {
  const { clock, gw, client } = setup({ challenge: [challenge(CHALLENGE, 26)] });
  const room = client.room("doors");
  room.start();
  await clock.tick(); // the challenge; the solve yields every slice
  await clock.tick();
  assert.equal(room.state, "solving");
  assert.ok(room.snapshot.work.hashes > 0, "progress is reported between slices");
  room.stop();
  await clock.drain(5);
  assert.deepEqual(gw.routes(), ["challenge"], "no join after stop()");
  assert.throws(() => client.room("Not A Room"), (e) => e instanceof SluiceError && e.code === "INVALID_ARGUMENT");
  await assert.rejects(client.room("elsewhere").leave(), (e) => e.code === "STATE_CONFLICT");
});

test("a room's snapshot is one frozen object per change, its work frozen with it", async () => {
  const { clock, gw, client } = setup({
    challenge: [challenge()],
    join: [joined()],
    poll: [polled("waiting"), polled("waiting")],
  });
  const polls = () => gw.routes().filter((r) => r === "poll").length;
  const room = client.room("doors");
  const idle = room.snapshot;
  assert.equal(room.snapshot, idle, "two reads without a change: the same object");
  assert.ok(Object.isFrozen(idle));
  room.start();
  while (polls() < 1 && (await clock.tick())); // challenge and solve, join, first poll
  const waiting = room.snapshot;
  assert.equal(waiting.state, "waiting");
  assert.notEqual(waiting, idle);
  assert.equal(room.snapshot, waiting);
  assert.ok(Object.isFrozen(waiting) && Object.isFrozen(waiting.work), "the work is frozen too");
  await clock.tick(); // a poll that says the same
  assert.equal(polls(), 2);
  assert.equal(room.snapshot, waiting, "an answer that changes nothing keeps the object");
});

test("rooms.js's room(client, code) takes a client of sluice.js; sluice.js's client has no rooms", async () => {
  const clock = new Clock();
  const gw = gateway({ challenge: [{ status: 200, json: { data: { room: "doors", required: false } } }], join: [joined()] });
  const client = createCommandClient({
    baseUrl: "http://gw.test", token: token("alice"), storage: new MemoryStorage(), fetch: gw.fetch,
    setTimeout: clock.setTimeout, clearTimeout: clock.clearTimeout, random: () => 0.5, Worker: null,
  });
  assert.equal(client.room, undefined, "a claim-only client carries no room code");
  const doors = roomOf(client, "doors");
  doors.start();
  await clock.tick(); // the door (open) and the join, in one step
  assert.deepEqual(gw.routes(), ["challenge", "join"]);
  assert.equal(doors.state, "waiting");
  assert.throws(() => roomOf({}, "doors"), (e) => e instanceof SluiceError && e.code === "INVALID_ARGUMENT");
  assert.throws(() => roomOf(client, "Doors!"), (e) => e.code === "INVALID_ARGUMENT");
});
