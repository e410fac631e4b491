// Sluice browser client, waiting rooms: one person's place in a room (`[[room]]` in the
// declaration), built on sluice.js's client. An entry of its own, so that a page that only
// claims never loads the rooms' code nor the proof-of-work solver (work.js):
//
//   import { createClient } from "@sluice/client/rooms";   // sluice.js's client, plus room(code)
//   const doors = createClient({ baseUrl, token }).room("doors");
//
// or, with a client made by sluice.js, `room(client, "doors")`. It re-exports everything of
// sluice.js and work.js, so a page that joins rooms imports from here alone.
//
// What it promises (and its tests check): a place is joined once: the door's proof of work is
// solved in a Web Worker (the main thread only when no worker can start), the solution and then
// the place ticket are stored, so a reload polls the same place instead of solving and joining
// again; once admitted the pass is kept alive with the heartbeats the gateway asks for.

import {
  DEFAULT_POLL_MS, MAX_BACKOFF_MS, SluiceError, _internals, backoffMs, createClient as createCommandClient,
  newRequestKey, pollDelayMs,
} from "./sluice.js";
import { solveOffMainThread } from "./work.js";

export * from "./sluice.js";
export * from "./work.js";

const { StoredHandle, refusal, sleep, MAX_ATTEMPTS, STORAGE_PREFIX } = _internals;

/**
 * A client of one gateway (sluice.js's `createClient`, same options) that also has
 * `room(code)`: this subject's place in room `code`.
 */
export function createClient(options) {
  const client = createCommandClient(options);
  client.room = (code) => room(client, code);
  return client;
}

/**
 * A handle on the place in room `code` of the subject of `client` (a client of sluice.js's
 * `createClient`): `start()` passes the door (solving its proof of work off the main thread),
 * joins and follows the place to its pass.
 */
export function room(client, code) {
  const parts = _internals.partsOf(client);
  if (typeof code !== "string" || !/^[a-z][a-z0-9_-]{0,63}$/.test(code)) {
    throw new SluiceError("INVALID_ARGUMENT", "code must be a declared room code");
  }
  return parts.adopt(new RoomHandle(parts.env, { call: parts.call, code, client: parts.subject }));
}

/** The statuses of a place on the server. */
export const PLACE_STATUSES = Object.freeze(["waiting", "admitted", "left", "expired"]);
/** The statuses after which a place never changes again. */
export const PLACE_FINAL = Object.freeze(["left", "expired"]);
/** The reasons of a join's `403` after which a new challenge is asked for (once). */
const STALE_CHALLENGE = Object.freeze(["challenge_expired", "challenge_used", "challenge_not_issued"]);
/** A stored solution this close to its challenge's expiry is not sent: a new one is solved. */
const PROOF_MARGIN_MS = 5_000;

/**
 * One person's place in one room: the door (a challenge, solved off the main thread when the
 * room asks for proof of work), the join, the polls while waiting and the heartbeats while
 * admitted. The place ticket is stored as soon as the join answers (and the solution as soon as
 * it is found), so a reload polls the same place instead of joining and solving again.
 */
class RoomHandle extends StoredHandle {
  constructor(env, { call, code, client }) {
    super(env, { call, code, client });
    this._renewals = 0;
    this._solve = null;
    this._pass = null;
    this._heartbeatNext = false;
    this._onVisible = () => {
      if (this._running && !this._heartbeatNext && this._snapshot.state === "waiting"
        && env.doc?.visibilityState === "visible") this._schedule(0);
    };
    this._snapshot = Object.freeze({ state: "idle", room: code, joinId: null, position: null, etaSeconds: null,
      opensAt: null, pass: null, passExpiresAt: null, updatedAt: null, work: null, error: null });
    const stored = this._load();
    if (stored) this._set({ state: stored.status ?? "idle", joinId: stored.joinId ?? null, work: stored.work ? Object.freeze(stored.work) : null });
  }

  get state() { return this._snapshot.state; }
  /** The pass while admitted (a JWT the protected origin verifies), else null. */
  get pass() { return this._snapshot.pass; }
  get passExpiresAt() { return this._snapshot.passExpiresAt; }

  /** Joins once (solving the door's challenge if asked), or continues the stored place. */
  start() {
    if (!this._load()) this._save({ joining: true, joinKey: newRequestKey() });
    return this.resume();
  }

  /** Continues a stored place or join (after a reload); false when there is none. */
  resume() {
    const stored = this._load();
    if (!stored) return false;
    if (this._running) return true;
    if (PLACE_FINAL.includes(stored.status)) {
      this._set({ state: stored.status });
      return true;
    }
    this._running = true;
    this._renewals = 0;
    this._env.doc?.addEventListener?.("visibilitychange", this._onVisible);
    this._schedule(0);
    return true;
  }

  /** Stops observing (and solving). The place stays at the gateway; `resume()` picks it up. */
  stop() {
    this._halt();
    this._solve?.cancel();
    this._solve = null;
  }

  /**
   * Gives the place back (`POST /v1/passes:leave` with the pass while admitted, else the
   * ticket) and stops; resolves to the snapshot (`left`, or `expired` if the pass ran out
   * first). Safe to repeat; a `429`/`503` or a lost answer is asked again, up to four attempts.
   */
  async leave() {
    const stored = this._load();
    if (!stored?.ticket) {
      throw new SluiceError("STATE_CONFLICT", "nothing to leave: the room has not answered a place yet");
    }
    this.stop();
    const body = this._pass && this._snapshot.state === "admitted" ? { pass: this._pass } : { ticket: stored.ticket };
    for (let attempt = 0; ; attempt += 1) {
      let answer = null;
      let thrown = null;
      try {
        answer = await this._call("POST", "/v1/passes:leave", { body });
      } catch (error) {
        if (error instanceof SluiceError) throw error;
        thrown = error;
      }
      if (answer?.status === 200) {
        this._pass = null;
        this._save({ status: answer.data.status });
        this._set({ state: answer.data.status, pass: null, passExpiresAt: null, position: null,
          etaSeconds: null, error: null });
        return this.snapshot;
      }
      const retryable = thrown !== null || answer.status === 429 || answer.status >= 500;
      if (!retryable || attempt + 1 >= MAX_ATTEMPTS) {
        throw answer ? refusal(answer)
          : new SluiceError("NETWORK", `the gateway could not be reached: ${thrown?.message ?? thrown}`, { retryable: true });
      }
      await sleep(this._env, backoffMs(attempt, answer?.retryAfterMs ?? null, this._env.random));
    }
  }

  /** Forgets the place once it has ended (or the join was refused for good): `start()` joins anew. */
  clear() {
    const state = this._snapshot.state;
    const refusedForGood = state === "error" && this._snapshot.error && !this._snapshot.error.retryable
      && !this._load()?.ticket;
    if (!PLACE_FINAL.includes(state) && !refusedForGood && this._load()) {
      throw new SluiceError("STATE_CONFLICT", `clear() forgets a place only once it has ended; it is ${state}`);
    }
    this.stop();
    this._env.storage.removeItem(this._storageKey());
    this._pass = null;
    this._set({ state: "idle", joinId: null, position: null, etaSeconds: null, opensAt: null, pass: null,
      passExpiresAt: null, updatedAt: null, work: null, error: null });
  }

  _subjectChanged() {
    this.stop();
    this._set({ state: "error", error: new SluiceError("SUBJECT_CHANGED", "the token now names another subject") });
  }

  /** `@room` cannot be a command code, so a room's record never meets a command's. */
  _storageKey() {
    return `${STORAGE_PREFIX}${this._env.base}|${this._subjectOf() ?? ""}|@room|${this._code}`;
  }

  /** One step: the door and the join until a ticket is stored, then polls or heartbeats. */
  async _step() {
    if (!this._running) return;
    const stored = this._load();
    if (!stored) return;
    if (!stored.ticket) return this._join(stored);
    if (this._heartbeatNext && this._pass) return this._heartbeat();
    return this._poll(stored);
  }

  /** The stored solution while its challenge is fresh enough to be sent, else null. */
  _freshProof(stored) {
    const proof = stored.proof;
    if (!proof) return null;
    const expires = Date.parse(proof.expiresAt ?? "");
    return Number.isFinite(expires) && expires - this._env.now() > PROOF_MARGIN_MS ? proof : null;
  }

  async _join(stored) {
    let proof = this._freshProof(stored);
    if (!proof && !stored.open) {
      this._set({ state: "joining" });
      let answer;
      try {
        answer = await this._call("POST", `/v1/rooms/${this._code}:challenge`);
      } catch (error) {
        return this._retry(null, error);
      }
      if (!this._running) return;
      if (answer.status === 429 || answer.status >= 500) return this._retry(answer, null);
      if (answer.status !== 200) return this._refused(answer);
      if (answer.data.required) {
        proof = await this._solved(answer.data);
        if (!proof) return;
      } else {
        this._save({ open: true });
      }
    }
    this._set({ state: "joining" });
    // One key for this join, kept with it: a retry after a lost answer is answered the place the
    // first attempt made, even if that place has ended meanwhile, never a second place.
    const joinKey = stored.joinKey ?? this._save({ joinKey: newRequestKey() }).joinKey;
    let answer;
    try {
      answer = await this._call("POST", `/v1/rooms/${this._code}:join`, {
        body: proof ? { proof_of_work: { challenge: proof.challenge, nonce: proof.nonce } } : undefined,
        idempotencyKey: joinKey,
      });
    } catch (error) {
      // Unknown outcome: the same key (and solution) is sent again, and a place it made is answered.
      return this._retry(null, error);
    }
    if (!this._running) return;
    if (answer.status === 200 || answer.status === 202) {
      this._attempt = 0;
      this._save({ ticket: answer.data.ticket, joinId: answer.data.join_id, proof: null, joining: false });
      this._record(answer.data);
      return this._next(answer.data);
    }
    if (answer.status === 429 || answer.status >= 500) return this._retry(answer, null);
    const reason = answer.error?.details?.reason;
    if (answer.status === 403 && STALE_CHALLENGE.includes(reason) && this._renewals < 1) {
      this._renewals += 1;
      this._save({ proof: null, open: false });
      return this._schedule(0);
    }
    return this._refused(answer);
  }

  /** Solves the challenge off the main thread; the solution is stored before any join. */
  async _solved(challenge) {
    const bits = challenge.bits;
    const started = this._env.clock();
    const work = { bits, hashes: 0, ms: 0, solver: null };
    this._set({ state: "solving", work: Object.freeze({ ...work }) });
    this._solve = solveOffMainThread(this._env, challenge.challenge, bits, {
      onStart: (where) => { work.solver = where; this._set({ work: Object.freeze({ ...work }) }); },
      onProgress: (hashes) => {
        work.hashes = hashes;
        work.ms = Math.round(this._env.clock() - started);
        this._set({ work: Object.freeze({ ...work }) });
      },
    });
    const solution = await this._solve.promise;
    this._solve = null;
    if (!solution || !this._running) return null;
    const done = { bits, hashes: solution.hashes, ms: Math.round(this._env.clock() - started), solver: solution.solver };
    const proof = { challenge: challenge.challenge, nonce: solution.nonce, expiresAt: challenge.expires_at };
    this._save({ proof, work: done });
    this._set({ work: Object.freeze(done) });
    return proof;
  }

  async _poll(stored) {
    let answer;
    try {
      answer = await this._call("GET", `/v1/tickets/${stored.ticket}`, { auth: false });
    } catch (error) {
      return this._retry(null, error);
    }
    if (!this._running) return;
    if (answer.status === 200) {
      this._attempt = 0;
      this._record(answer.data);
      return this._next(answer.data);
    }
    if (answer.status === 401 || answer.status === 404) return this._refused(answer);
    return this._retry(answer, null);
  }

  async _heartbeat() {
    let answer;
    try {
      answer = await this._call("POST", "/v1/passes:heartbeat", { body: { pass: this._pass } });
    } catch (error) {
      return this._retry(null, error);
    }
    if (!this._running) return;
    if (answer.status === 200) {
      this._attempt = 0;
      this._record(answer.data);
      return this._next(answer.data);
    }
    if (answer.status === 409 && PLACE_FINAL.includes(answer.error?.details?.state)) {
      // The pass lapsed or the place was left elsewhere: a heartbeat never revives it.
      const state = answer.error.details.state;
      this._pass = null;
      this._save({ status: state });
      this.stop();
      this._set({ state, pass: null, passExpiresAt: null, error: null });
      return;
    }
    if (answer.status === 429 || answer.status >= 500) return this._retry(answer, null);
    return this._refused(answer);
  }

  _record(data) {
    this._pass = data.pass ?? null;
    this._save({ status: data.status });
    this._set({
      state: data.status,
      joinId: data.join_id ?? this._snapshot.joinId,
      position: data.queue?.position ?? null,
      etaSeconds: data.eta_seconds ?? null,
      opensAt: data.opens_at ?? null,
      pass: data.pass ?? null,
      passExpiresAt: data.pass_expires_at ?? null,
      updatedAt: data.queue?.observed_at ?? null,
      error: null,
    });
  }

  /** Waiting: poll as advised. Admitted: heartbeat when asked, else look again when the pass ends. */
  _next(data) {
    this._heartbeatNext = false;
    if (PLACE_FINAL.includes(data.status)) {
      this.stop();
      return;
    }
    if (data.status === "admitted") {
      if (Number.isFinite(data.heartbeat_after_ms)) {
        // Not slowed for a hidden tab: a late heartbeat loses the pass.
        this._heartbeatNext = true;
        this._schedule(data.heartbeat_after_ms);
      } else {
        const left = Date.parse(data.pass_expires_at ?? "") - this._env.now();
        this._schedule(Number.isFinite(left) ? Math.min(Math.max(left + 1_000, 1_000), 2 ** 31 - 1) : DEFAULT_POLL_MS);
      }
      return;
    }
    this._schedule(pollDelayMs(data.poll_after_ms, this._hidden(), this._env.random));
  }

  /** A refusal for good: the handle stops and says why (a stored solution is dropped). */
  _refused(answer) {
    this.stop();
    if (!this._load()?.ticket) this._save({ proof: null });
    this._set({ state: "error", error: refusal(answer) });
  }

  /** Tries again after a backoff; before the place is known the state is `error` meanwhile. */
  _retry(answer, thrown) {
    const error = answer
      ? refusal(answer)
      : new SluiceError("NETWORK", `the gateway could not be reached: ${thrown?.message ?? thrown}`);
    error.retryable = true;
    const placed = Boolean(this._load()?.ticket);
    this._set(placed ? { error } : { state: "error", error });
    const wait = backoffMs(this._attempt, answer?.retryAfterMs ?? null, this._env.random);
    this._attempt += 1;
    const hidden = this._hidden() && !this._heartbeatNext;
    this._schedule(hidden ? Math.max(wait, MAX_BACKOFF_MS) : wait);
  }

  _failed(error) {
    if (error instanceof SluiceError && error.code === "SUBJECT_CHANGED") return;
    this._retry(null, error);
  }
}
