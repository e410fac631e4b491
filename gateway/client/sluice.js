// Sluice browser client: enqueue a command once, follow its signed ticket, resume after a reload.
//
// No framework and no dependency. What it promises (and its tests check):
// - one intent per `command(code, { key })`: a fresh request key is stored *before* the first
//   request, so a reload, a lost answer or a second `start()` never creates a second command;
// - an enqueue whose outcome is unknown (network error, 5xx, 429) is sent again with the same
//   request key: the gateway answers the original command (`200`, deduplicated) if it exists;
// - only the ticket is polled, at the `poll_after_ms` the gateway advised (with jitter); errors
//   back off exponentially up to 30 s, never earlier than `Retry-After`; a hidden tab polls at
//   most every 30 s and catches up as soon as it is visible again;
// - state lives in `storage` (sessionStorage by default); without a working storage the client
//   refuses to start instead of keeping an intent in memory that a reload would forget;
// - a reserved unit (a quota command in reserved mode) is read, confirmed or released by its
//   holder with `allocation(id)`, `confirm(id)` and `release(id)`: all three are safe to repeat
//   (a repeated confirm or release answers `changed: false`), so an answer lost to the network
//   is asked again like a 503, and the decision of a payment is never left unknown for a glitch;
// - a place in a waiting room (`room(code)`) is joined once: the door's proof of work is solved in
//   a Web Worker (the main thread only when no worker can start), the solution and then the
//   place ticket are stored, so a reload polls the same place instead of solving and joining
//   again; once admitted the pass is kept alive with the heartbeats the gateway asks for.

/** The statuses a command has on the server. */
export const STATUSES = Object.freeze([
  "accepted", "executing", "running", "retry_wait",
  "succeeded", "rejected", "failed", "expired", "cancelled", "needs_review",
]);
/** The statuses after which nothing changes any more. */
export const FINAL = Object.freeze(["succeeded", "rejected", "failed", "expired", "cancelled"]);

/** Longest wait between two attempts after errors, and for a hidden tab. */
export const MAX_BACKOFF_MS = 30_000;
/** First wait after an error. */
export const FIRST_BACKOFF_MS = 500;
/** How long one request may take before the client gives up on it and backs off. */
export const REQUEST_TIMEOUT_MS = 15_000;
/** Poll interval when the gateway advised none. */
export const DEFAULT_POLL_MS = 2_000;
const STORAGE_PREFIX = "sluice:v1:";

/**
 * A refusal or failure the client reports; `retryable` says whether it will try again itself.
 * `details` is the API's `error.details` when it sent one: e.g. `{state}` on the `409
 * STATE_CONFLICT` of a confirm or release, the state that forbids it.
 */
export class SluiceError extends Error {
  constructor(code, message, { status = 0, retryable = false, retryAfterMs = null, details = null } = {}) {
    super(message);
    this.name = "SluiceError";
    this.code = code;
    this.status = status;
    this.retryable = retryable;
    this.retryAfterMs = retryAfterMs;
    this.details = details;
  }
}

/** The states of an allocation (`GET /v1/allocations/{id}`). */
export const ALLOCATION_STATES = Object.freeze(["reserved", "confirmed", "released", "expired"]);

/** Attempts of a call the client repeats by itself (`read`, `allocation`, `confirm`, `release`). */
const MAX_ATTEMPTS = 4;

const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/**
 * The wait before attempt `attempt` (0 = the first retry): exponential from FIRST_BACKOFF_MS,
 * capped at MAX_BACKOFF_MS, with "full jitter" (a uniform draw in [half, all] of it) so that
 * thousands of pages that failed together do not come back together; never less than the
 * server's `Retry-After`.
 */
export function backoffMs(attempt, retryAfterMs, random = Math.random) {
  const ceiling = Math.min(MAX_BACKOFF_MS, FIRST_BACKOFF_MS * 2 ** Math.min(attempt, 16));
  const jittered = ceiling / 2 + random() * (ceiling / 2);
  return Math.min(MAX_BACKOFF_MS, Math.max(jittered, retryAfterMs ?? 0));
}

/** The advised poll interval with ±10 % jitter; a hidden tab waits at least MAX_BACKOFF_MS. */
export function pollDelayMs(advisedMs, hidden, random = Math.random) {
  const base = Number.isFinite(advisedMs) && advisedMs > 0 ? advisedMs : DEFAULT_POLL_MS;
  const jittered = base * (0.9 + random() * 0.2);
  return hidden ? Math.max(jittered, MAX_BACKOFF_MS) : jittered;
}

/** The `sub` and `exp` of a JWT, or null (nothing is verified: the gateway does that). */
export function tokenClaims(token) {
  try {
    const payload = token.split(".")[1];
    const json = atob(payload.replace(/-/g, "+").replace(/_/g, "/"));
    const claims = JSON.parse(json);
    return { sub: String(claims.sub), exp: Number(claims.exp) };
  } catch {
    return null;
  }
}

/** A fresh request key: 128 random bits, URL-safe. */
export function newRequestKey() {
  if (globalThis.crypto?.randomUUID) return `k-${globalThis.crypto.randomUUID()}`;
  const bytes = new Uint8Array(16);
  globalThis.crypto.getRandomValues(bytes);
  return `k-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

function checkStorage(storage) {
  if (!storage) {
    throw new SluiceError("STORAGE_UNAVAILABLE",
      "no storage: the client keeps each intent in storage so that a reload never creates a second one; pass `storage` or allow sessionStorage");
  }
  const probe = `${STORAGE_PREFIX}probe`;
  try {
    storage.setItem(probe, "1");
    storage.removeItem(probe);
  } catch (cause) {
    throw new SluiceError("STORAGE_UNAVAILABLE",
      `storage refused a write (${cause?.name ?? "error"}): the client will not keep an intent it could lose on reload`);
  }
}

/**
 * A client of one Sluice gateway for one subject token.
 *
 * @param {object} options
 * @param {string} options.baseUrl   the gateway, e.g. "https://gateway.example"
 * @param {string|(() => string|Promise<string>)} options.token  a subject token, or a function
 *   returning a fresh one (called again when the current one is about to expire or is refused)
 * @param {Storage} [options.storage]  defaults to sessionStorage
 */
export function createClient(options) {
  const {
    baseUrl,
    token,
    storage = globalThis.sessionStorage,
    fetch: fetchImpl = globalThis.fetch?.bind(globalThis),
    setTimeout: setTimer = globalThis.setTimeout.bind(globalThis),
    clearTimeout: clearTimer = globalThis.clearTimeout.bind(globalThis),
    random = Math.random,
    now = () => Date.now(),
    document: doc = globalThis.document,
    requestTimeoutMs = REQUEST_TIMEOUT_MS,
    Worker: WorkerImpl = globalThis.Worker,
    location: loc = globalThis.location,
    clock = globalThis.performance?.now ? () => globalThis.performance.now() : now,
  } = options ?? {};
  if (typeof baseUrl !== "string" || !/^https?:\/\//.test(baseUrl)) {
    throw new SluiceError("INVALID_ARGUMENT", "baseUrl must be an http(s) URL");
  }
  if (typeof token !== "string" && typeof token !== "function") {
    throw new SluiceError("INVALID_ARGUMENT", "token must be a subject token or a function returning one");
  }
  checkStorage(storage);
  const base = baseUrl.replace(/\/+$/, "");
  const env = {
    fetchImpl, setTimer, clearTimer, random, now, doc, storage, base, clock, Worker: WorkerImpl, location: loc,
  };

  let current = typeof token === "string" ? token : null;
  let subject = current ? tokenClaims(current)?.sub ?? null : null;

  /** The token to send: refreshed from the function when absent, refused or near expiry. */
  async function bearer(forceFresh = false) {
    const claims = current ? tokenClaims(current) : null;
    const stale = !current || forceFresh || (claims && claims.exp * 1000 - now() < 30_000);
    if (stale && typeof token === "function") {
      current = await token();
      const sub = tokenClaims(current)?.sub ?? null;
      if (subject !== null && sub !== subject) {
        subject = sub;
        for (const handle of handles) handle._subjectChanged();
        throw new SluiceError("SUBJECT_CHANGED", "the token names another subject: every command of the previous one stops");
      }
      subject = sub;
    }
    return current;
  }

  /** One request, abandoned after `requestTimeoutMs` (a stuck gateway must not hold a page). */
  async function send(method, path, headers, body) {
    const abort = typeof AbortController === "function" ? new AbortController() : null;
    const timer = abort ? setTimer(() => abort.abort(), requestTimeoutMs) : null;
    try {
      return await fetchImpl(`${base}${path}`, {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body),
        credentials: "omit", cache: "no-store", signal: abort?.signal,
      });
    } finally {
      if (timer !== null) clearTimer(timer);
    }
  }

  /** One API call; resolves to {status, data, error, retryAfterMs}. Network errors reject. */
  async function call(method, path, { body, auth = true, retryOn401 = true, idempotencyKey } = {}) {
    const headers = { accept: "application/json" };
    if (idempotencyKey) headers["idempotency-key"] = idempotencyKey;
    if (auth) headers.authorization = `Bearer ${await bearer()}`;
    if (body !== undefined) headers["content-type"] = "application/json";
    let response = await send(method, path, headers, body);
    if (response.status === 401 && auth && retryOn401 && typeof token === "function") {
      headers.authorization = `Bearer ${await bearer(true)}`;
      response = await send(method, path, headers, body);
    }
    let json = null;
    try { json = await response.json(); } catch { json = null; }
    const header = response.headers?.get?.("retry-after");
    const retryAfterMs = json?.error?.retry_after_ms
      ?? (header && Number.isFinite(Number(header)) ? Number(header) * 1000 : null);
    return { status: response.status, data: json?.data ?? null, error: json?.error ?? null, retryAfterMs };
  }

  /**
   * A call that is safe to repeat, resolved to its `data`: a `429` or `503` is asked again after
   * a backoff (never earlier than `Retry-After`), and, with `lostAnswers`, so is a network error
   * (the outcome of the call is then unknown, and repeating it is what makes it known), up to
   * MAX_ATTEMPTS in all. Any other answer is thrown as a SluiceError at once.
   */
  async function repeatable(method, path, { lostAnswers = false } = {}) {
    for (let attempt = 0; ; attempt += 1) {
      let answer;
      try {
        answer = await call(method, path);
      } catch (thrown) {
        // The client's own errors (a token naming another subject) are not the network's.
        if (thrown instanceof SluiceError || !lostAnswers) throw thrown;
        if (attempt + 1 >= MAX_ATTEMPTS) {
          throw new SluiceError("NETWORK", `the gateway could not be reached: ${thrown?.message ?? thrown}`,
            { retryable: true });
        }
        await sleep(env, backoffMs(attempt, null, random));
        continue;
      }
      if (answer.status === 200) return answer.data;
      const retryable = answer.status === 503 || answer.status === 429;
      if (!retryable || attempt + 1 >= MAX_ATTEMPTS) throw refusal(answer);
      await sleep(env, backoffMs(attempt, answer.retryAfterMs, random));
    }
  }

  /** `/v1/allocations/{id}` and its custom methods; an id that cannot exist is refused here. */
  function allocationPath(id, verb = "") {
    if (typeof id !== "string" || !UUID.test(id)) {
      throw new SluiceError("INVALID_ARGUMENT", "id must be an allocation id (a uuid, the result's allocation_id)");
    }
    return `/v1/allocations/${id}${verb}`;
  }

  const handles = new Set();

  const client = {
    get subject() { return subject; },

    /** `GET /v1/reads/{name}?…`: the items and their freshness fields. */
    async read(name, params = {}) {
      const query = new URLSearchParams(params).toString();
      return repeatable("GET", `/v1/reads/${encodeURIComponent(name)}${query ? `?${query}` : ""}`);
    },

    /**
     * `GET /v1/allocations/{id}`: the allocation's state now (`reserved`, `confirmed`,
     * `released` or `expired`, with `expires_at` while reserved or once expired). The receipt
     * in a command's result never changes; this is what counts. Only its holder may read it.
     */
    async allocation(id) {
      return repeatable("GET", allocationPath(id), { lostAnswers: true });
    },

    /**
     * `POST /v1/allocations/{id}:confirm`: keeps a reserved unit (after the payment, before
     * `expires_at`). Resolves to the allocation with `changed` (false: it was confirmed
     * already). Released or expired first: a SluiceError `STATE_CONFLICT`, `details.state`
     * saying which.
     */
    async confirm(id) {
      return repeatable("POST", allocationPath(id, ":confirm"), { lostAnswers: true });
    },

    /**
     * `POST /v1/allocations/{id}:release`: gives a reserved unit back to the pool (the subject
     * never gets another one from it). Resolves like `confirm`; confirmed or expired first: a
     * SluiceError `STATE_CONFLICT` with `details.state`.
     */
    async release(id) {
      return repeatable("POST", allocationPath(id, ":release"), { lostAnswers: true });
    },

    /**
     * A handle on one intent of command `code`. `key` names the intent in this page (for
     * example the offer being bought): the same key after a reload is the same intent.
     */
    command(code, { input, key } = {}) {
      if (typeof code !== "string" || !/^[a-z][a-z0-9_-]*$/.test(code)) {
        throw new SluiceError("INVALID_ARGUMENT", "code must be a declared command code");
      }
      if (typeof key !== "string" || key.length === 0 || key.length > 200) {
        throw new SluiceError("INVALID_ARGUMENT", "key must name the intent (1 to 200 characters)");
      }
      const handle = new CommandHandle(env, { call, code, input, key, client: () => subject });
      handles.add(handle);
      return handle;
    },

    /**
     * A handle on this subject's place in room `code`: `start()` passes the door (solving its
     * proof of work off the main thread), joins and follows the place to its pass.
     */
    room(code) {
      if (typeof code !== "string" || !/^[a-z][a-z0-9_-]{0,63}$/.test(code)) {
        throw new SluiceError("INVALID_ARGUMENT", "code must be a declared room code");
      }
      const handle = new RoomHandle(env, { call, code, client: () => subject });
      handles.add(handle);
      return handle;
    },
  };
  return client;
}

function refusal(answer) {
  const error = answer.error ?? {};
  return new SluiceError(error.code ?? `HTTP_${answer.status}`, error.message ?? `the gateway answered ${answer.status}`, {
    status: answer.status,
    retryable: Boolean(error.retryable),
    retryAfterMs: answer.retryAfterMs,
    details: error.details && typeof error.details === "object" ? error.details : null,
  });
}

function sleep(env, ms) {
  return new Promise((resolve) => env.setTimer(resolve, ms));
}

/**
 * What a command's handle and a room's share: the record kept in `storage` under the handle's
 * own `_storageKey()`, the observers of its snapshot, and the one timer that runs its `_step()`
 * (a failure of which goes to its `_failed`).
 */
class StoredHandle {
  constructor(env, { call, code, client }) {
    this._env = env;
    this._call = call;
    this._code = code;
    this._subjectOf = client;
    this._listeners = new Set();
    this._timer = null;
    this._running = false;
    this._attempt = 0;
  }

  /** Calls `listener(snapshot)` on every change (and once now); returns the unsubscribe. */
  subscribe(listener) {
    this._listeners.add(listener);
    listener(this.snapshot);
    return () => this._listeners.delete(listener);
  }

  _load() {
    const text = this._env.storage.getItem(this._storageKey());
    if (!text) return null;
    try { return JSON.parse(text); } catch { return null; }
  }

  _save(patch) {
    const record = { ...(this._load() ?? {}), ...patch };
    this._env.storage.setItem(this._storageKey(), JSON.stringify(record));
    return record;
  }

  /** The current snapshot: one frozen object, replaced only when something in it changes. */
  get snapshot() { return this._snapshot; }

  /**
   * Applies `patch` to the snapshot: a change makes a new frozen snapshot and tells every
   * listener; a patch that changes nothing keeps the object (a reader such as React's
   * `useSyncExternalStore` compares snapshots by identity) and tells no one.
   */
  _set(patch) {
    const current = this._snapshot;
    if (current && Object.keys(patch).every((name) => Object.is(current[name], patch[name]))) return;
    const next = { ...current, ...patch };
    if (next.work) next.work = Object.isFrozen(next.work) ? next.work : Object.freeze({ ...next.work });
    this._snapshot = Object.freeze(next);
    for (const listener of this._listeners) {
      try { listener(this._snapshot); } catch { /* a listener's failure is its own */ }
    }
  }

  _schedule(ms) {
    if (!this._running) return;
    if (this._timer !== null) this._env.clearTimer(this._timer);
    this._timer = this._env.setTimer(() => {
      this._timer = null;
      this._step().catch((error) => this._failed(error));
    }, ms);
  }

  _hidden() {
    return this._env.doc?.visibilityState === "hidden";
  }

  /** Stops the timer and the watch on the tab's visibility; the stored record stays. */
  _halt() {
    this._running = false;
    if (this._timer !== null) this._env.clearTimer(this._timer);
    this._timer = null;
    this._env.doc?.removeEventListener?.("visibilitychange", this._onVisible);
  }
}

/** One intent: its stored record, its state, its observers and its timer. */
class CommandHandle extends StoredHandle {
  constructor(env, { call, code, input, key, client }) {
    super(env, { call, code, client });
    this._input = input;
    this._key = key;
    this._onVisible = () => {
      if (this._running && env.doc?.visibilityState === "visible") this._schedule(0);
    };
    this._snapshot = Object.freeze({ state: "idle", commandId: null, position: null, etaSeconds: null,
      updatedAt: null, result: null, error: null });
    const stored = this._load();
    if (stored?.status) this._set({ state: stored.status, commandId: stored.commandId ?? null });
  }

  /** The current state (the snapshot's `state`). */
  get state() { return this._snapshot.state; }

  /** Creates the intent once (or continues the stored one) and follows it. */
  start() {
    const stored = this._load();
    if (stored) return this.resume();
    if (this._input === undefined) {
      throw new SluiceError("INVALID_ARGUMENT", "start() needs the command's input");
    }
    // Stored before the first request: whatever happens next, this key is the intent.
    this._save({ requestKey: newRequestKey(), input: this._input });
    return this.resume();
  }

  /** Continues a stored intent (after a reload); false when there is none. */
  resume() {
    const stored = this._load();
    if (!stored) return false;
    this._running = true;
    this._env.doc?.addEventListener?.("visibilitychange", this._onVisible);
    if (stored.ticket && FINAL.includes(stored.status)) {
      this._set({ state: stored.status, commandId: stored.commandId });
      this._running = false;
      return true;
    }
    this._schedule(0);
    return true;
  }

  /** Stops observing. The command goes on at the gateway; `resume()` picks it up again. */
  stop() {
    this._halt();
  }

  /** Asks the gateway to cancel; resolves to the snapshot after its answer. */
  async cancel() {
    const stored = this._load();
    if (!stored?.commandId) throw new SluiceError("STATE_CONFLICT", "nothing to cancel: the command is not known to exist yet");
    const answer = await this._call("POST", `/v1/commands/${stored.commandId}:cancel`);
    if (answer.status !== 200) throw refusal(answer);
    this._record(answer.data);
    if (FINAL.includes(answer.data.status)) this.stop();
    return this.snapshot;
  }

  /** Forgets the intent, only once it has ended (or was refused for good). */
  clear() {
    const state = this._snapshot.state;
    const refusedForGood = state === "error" && this._snapshot.error && !this._snapshot.error.retryable
      && !this._load()?.commandId;
    if (!FINAL.includes(state) && !refusedForGood) {
      throw new SluiceError("STATE_CONFLICT", `clear() forgets an intent only once it has ended; it is ${state}`);
    }
    this.stop();
    this._env.storage.removeItem(this._storageKey());
    this._set({ state: "idle", commandId: null, error: null, result: null, position: null, etaSeconds: null });
  }

  _subjectChanged() {
    this.stop();
    this._set({ state: "error", error: new SluiceError("SUBJECT_CHANGED", "the token now names another subject") });
  }

  _storageKey() {
    return `${STORAGE_PREFIX}${this._env.base}|${this._subjectOf() ?? ""}|${this._code}|${this._key}`;
  }

  /** One step: enqueue (again) while the outcome is unknown, else poll the ticket. */
  async _step() {
    if (!this._running) return;
    const stored = this._load();
    if (!stored) return;
    if (!stored.ticket) return this._enqueue(stored);
    return this._poll(stored);
  }

  async _enqueue(stored) {
    if (stored.attempted) this._set({ state: "recovering" });
    this._save({ attempted: true });
    let answer;
    try {
      answer = await this._call("POST", `/v1/commands/${this._code}:enqueue`, {
        body: { request_key: stored.requestKey, input: stored.input },
      });
    } catch (error) {
      return this._retry(null, error);
    }
    if (answer.status === 200 || answer.status === 202) {
      this._attempt = 0;
      this._save({ ticket: answer.data.ticket, commandId: answer.data.command_id });
      this._record(answer.data);
      return this._next(answer.data);
    }
    if (answer.status === 429 || answer.status >= 500) return this._retry(answer, null);
    // A refusal for good (invalid input, no such command, another content under this key):
    // no command exists for it; the key is kept so `clear()` can be called knowingly.
    this.stop();
    this._set({ state: "error", error: refusal(answer) });
  }

  async _poll(stored) {
    let answer;
    try {
      answer = await this._call("GET", `/v1/tickets/${stored.ticket}`, { auth: false });
    } catch (error) {
      return this._retry(null, error);
    }
    if (answer.status === 200) {
      this._attempt = 0;
      this._record(answer.data);
      return this._next(answer.data);
    }
    if (answer.status === 401 || answer.status === 404) {
      // A ticket is valid until the command's deadline plus the retention: the command ended
      // long ago and its row may be gone. Enqueueing again could create a second command, so
      // the client stops and says so.
      this.stop();
      this._set({ state: "error", error: refusal(answer) });
      return;
    }
    return this._retry(answer, null);
  }

  _record(data) {
    this._save({ status: data.status, commandId: data.command_id });
    this._set({
      state: data.status,
      commandId: data.command_id,
      position: data.queue?.position ?? null,
      etaSeconds: data.eta_seconds ?? null,
      updatedAt: data.updated_at ?? data.queue?.observed_at ?? null,
      result: data.result ?? null,
      error: data.error ? new SluiceError(data.error.code, data.error.message) : null,
    });
  }

  _next(data) {
    if (FINAL.includes(data.status)) {
      this.stop();
      return;
    }
    this._schedule(pollDelayMs(data.poll_after_ms, this._hidden(), this._env.random));
  }

  /**
   * After an unknown outcome or a retryable refusal: tries again after a backoff. Before the
   * command is confirmed the state is `error` (the request key is kept, the next attempt sends
   * it again); once it is confirmed the last known status stays, with the error beside it.
   */
  _retry(answer, thrown) {
    const error = answer
      ? refusal(answer)
      : new SluiceError("NETWORK", `the gateway could not be reached: ${thrown?.message ?? thrown}`);
    error.retryable = true;
    const confirmed = Boolean(this._load()?.ticket);
    this._set(confirmed ? { error } : { state: "error", error });
    const wait = backoffMs(this._attempt, answer?.retryAfterMs ?? null, this._env.random);
    this._attempt += 1;
    this._schedule(this._hidden() ? Math.max(wait, MAX_BACKOFF_MS) : wait);
  }

  _failed(error) {
    if (error instanceof SluiceError && error.code === "SUBJECT_CHANGED") return;
    this._retry(null, error);
  }
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
    if (stored) this._set({ state: stored.status ?? "idle", joinId: stored.joinId ?? null, work: stored.work ?? null });
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
    this._set({ state: "solving", work: { ...work } });
    this._solve = solveOffMainThread(this._env, challenge.challenge, bits, {
      onStart: (where) => { work.solver = where; this._set({ work: { ...work } }); },
      onProgress: (hashes) => {
        work.hashes = hashes;
        work.ms = Math.round(this._env.clock() - started);
        this._set({ work: { ...work } });
      },
    });
    const solution = await this._solve.promise;
    this._solve = null;
    if (!solution || !this._running) return null;
    const done = { bits, hashes: solution.hashes, ms: Math.round(this._env.clock() - started), solver: solution.solver };
    const proof = { challenge: challenge.challenge, nonce: solution.nonce, expiresAt: challenge.expires_at };
    this._save({ proof, work: done });
    this._set({ work: done });
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

// ---------------------------------------------------------------------------------------------
// Proof of work: a room's door may ask for the solution of a challenge (a nonce such that
// SHA-256 of `challenge + ":" + nonce` begins with `bits` zero bits). WebCrypto's digest is
// asynchronous, one promise per hash, far too slow for 2^bits of them: this is a small
// synchronous SHA-256 specialised for the puzzle. The prefix `challenge + ":"` never changes, so
// its complete 64-byte blocks are compressed once (the midstate) and each nonce costs only the
// compression of the tail's blocks.

/**
 * The solver, self-contained: no reference to anything outside this function, so that its
 * source text (`Function.prototype.toString`) is what a Blob-URL worker runs.
 */
export function workSolverKit() {
  const K = new Int32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
  ]);
  const INITIAL = new Int32Array([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  ]);
  const W = new Int32Array(64);

  /** Compresses the block of 16 big-endian words at `words[offset…]` into `state`, in place. */
  function compress(state, words, offset) {
    for (let i = 0; i < 16; i += 1) W[i] = words[offset + i];
    for (let i = 16; i < 64; i += 1) {
      const a = W[i - 15];
      const b = W[i - 2];
      const s0 = ((a >>> 7) | (a << 25)) ^ ((a >>> 18) | (a << 14)) ^ (a >>> 3);
      const s1 = ((b >>> 17) | (b << 15)) ^ ((b >>> 19) | (b << 13)) ^ (b >>> 10);
      W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
    }
    let a = state[0]; let b = state[1]; let c = state[2]; let d = state[3];
    let e = state[4]; let f = state[5]; let g = state[6]; let h = state[7];
    for (let i = 0; i < 64; i += 1) {
      const s1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      const t1 = (h + s1 + ((e & f) ^ (~e & g)) + K[i] + W[i]) | 0;
      const s0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      const t2 = (s0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
    }
    state[0] = (state[0] + a) | 0; state[1] = (state[1] + b) | 0;
    state[2] = (state[2] + c) | 0; state[3] = (state[3] + d) | 0;
    state[4] = (state[4] + e) | 0; state[5] = (state[5] + f) | 0;
    state[6] = (state[6] + g) | 0; state[7] = (state[7] + h) | 0;
  }

  /** Big-endian words `from…to` (exclusive) of `bytes` into `words`. */
  function toWords(bytes, words, from, to) {
    for (let i = from; i < to; i += 1) {
      const j = i * 4;
      words[i] = (bytes[j] << 24) | (bytes[j + 1] << 16) | (bytes[j + 2] << 8) | bytes[j + 3];
    }
  }

  /**
   * The state after every complete 64-byte block of `prefix`: `{state, rest, length}`, where
   * `rest` is what is left of the prefix (under 64 bytes) and `length` the bytes compressed.
   */
  function midstate(prefix) {
    const state = Int32Array.from(INITIAL);
    const complete = prefix.length - (prefix.length % 64);
    const words = new Int32Array(16);
    for (let at = 0; at < complete; at += 64) {
      toWords(prefix.subarray(at, at + 64), words, 0, 16);
      compress(state, words, 0);
    }
    return { state, rest: prefix.slice(complete), length: complete };
  }

  /** The blocks of the message's end (`rest` then `tail`) with SHA-256's padding, as bytes. */
  function paddedTail(mid, tailLength) {
    const total = mid.rest.length + tailLength;
    const blocks = Math.floor((total + 8) / 64) + 1;
    const bytes = new Uint8Array(blocks * 64);
    bytes.set(mid.rest);
    bytes[total] = 0x80;
    const bits = (mid.length + total) * 8;
    const end = blocks * 64;
    const high = Math.floor(bits / 0x100000000);
    const low = bits >>> 0;
    bytes[end - 8] = high >>> 24; bytes[end - 7] = high >>> 16; bytes[end - 6] = high >>> 8; bytes[end - 5] = high;
    bytes[end - 4] = low >>> 24; bytes[end - 3] = low >>> 16; bytes[end - 2] = low >>> 8; bytes[end - 1] = low;
    return bytes;
  }

  /** SHA-256 of the midstate's message followed by `tail`: the 32-byte digest. */
  function finish(mid, tail) {
    const bytes = paddedTail(mid, tail.length);
    bytes.set(tail, mid.rest.length);
    const words = new Int32Array(bytes.length / 4);
    toWords(bytes, words, 0, words.length);
    const state = Int32Array.from(mid.state);
    for (let offset = 0; offset < words.length; offset += 16) compress(state, words, offset);
    const digest = new Uint8Array(32);
    for (let i = 0; i < 8; i += 1) {
      digest[i * 4] = state[i] >>> 24; digest[i * 4 + 1] = state[i] >>> 16;
      digest[i * 4 + 2] = state[i] >>> 8; digest[i * 4 + 3] = state[i];
    }
    return digest;
  }

  /** SHA-256 of `bytes`. */
  function sha256(bytes) {
    return finish(midstate(bytes), new Uint8Array(0));
  }

  /** Whether the state (as a digest, big-endian) begins with `bits` zero bits. */
  function leadingZeros(state, bits) {
    let i = 0;
    let left = bits;
    for (; left >= 32; left -= 32, i += 1) if (state[i] !== 0) return false;
    return left === 0 || (state[i] >>> (32 - left)) === 0;
  }

  /** The ASCII bytes of a text (a challenge is base64url, so ASCII). */
  function ascii(text) {
    const bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i += 1) bytes[i] = text.charCodeAt(i) & 0xff;
    return bytes;
  }

  /**
   * A search for the nonce of `challenge` at `bits`: `step(n)` tries at most `n` more nonces
   * and answers the solution (decimal text) or null; `hashes` counts the nonces tried.
   *
   * Nonces begin with a few fixed digits (`lead`, e.g. "10000") that complete the prefix's last
   * 64-byte block, when 1 to 8 digits do: the midstate then covers them too, the counted digits
   * start a fresh block and each nonce costs one compression instead of two (a challenge of
   * 122 characters leaves 59 bytes in its last block). The counted digits go up in place from
   * `first`, and only the words they touch are converted again per nonce.
   */
  function createSolver(challenge, bits, first = 0) {
    const open = (64 - ((challenge.length + 1) % 64)) % 64;
    const lead = open >= 1 && open <= 8 ? "1".padEnd(open, "0") : "";
    const mid = midstate(ascii(`${challenge}:${lead}`));
    const digits = Array.from(String(Math.floor(first)), (c) => c.charCodeAt(0));
    const state = new Int32Array(8);
    let bytes; let words; let fromWord; let toWord;
    function layout() {
      bytes = paddedTail(mid, digits.length);
      words = new Int32Array(bytes.length / 4);
      toWords(bytes, words, 0, words.length);
      fromWord = mid.rest.length >> 2;
      toWord = ((mid.rest.length + digits.length - 1) >> 2) + 1;
    }
    layout();
    const solver = {
      hashes: 0,
      step(limit) {
        const at = mid.rest.length;
        for (let n = 0; n < limit; n += 1) {
          for (let i = 0; i < digits.length; i += 1) bytes[at + i] = digits[i];
          toWords(bytes, words, fromWord, toWord);
          state.set(mid.state);
          for (let offset = 0; offset < words.length; offset += 16) compress(state, words, offset);
          solver.hashes += 1;
          const found = leadingZeros(state, bits) ? lead + String.fromCharCode(...digits) : null;
          // The next nonce: decimal increment with carry; one more digit after all nines.
          let i = digits.length - 1;
          while (i >= 0 && digits[i] === 57) { digits[i] = 48; i -= 1; }
          if (i >= 0) digits[i] += 1;
          else { digits.unshift(49); layout(); }
          if (found !== null) return found;
        }
        return null;
      },
    };
    return solver;
  }

  /** Whether `nonce` solves `challenge` at `bits`, checked with the plain hash. */
  function solves(challenge, nonce, bits) {
    if (!/^[0-9]{1,20}$/.test(nonce)) return false;
    const digest = sha256(ascii(`${challenge}:${nonce}`));
    const state = new Int32Array(8);
    for (let i = 0; i < 8; i += 1) {
      state[i] = (digest[i * 4] << 24) | (digest[i * 4 + 1] << 16) | (digest[i * 4 + 2] << 8) | digest[i * 4 + 3];
    }
    return leadingZeros(state, bits);
  }

  return { sha256, midstate, finish, createSolver, solves, ascii };
}

/**
 * A worker's side of a solve: answers `{ready}` once loaded, then for `{challenge, bits}`
 * reports `{progress: hashes}` about every 100 ms and ends with `{nonce, hashes}`.
 * Self-contained like `workSolverKit` (the Blob-URL worker runs its source text).
 */
export function serveWorkIn(scope, kit) {
  scope.onmessage = (event) => {
    const { challenge, bits } = event.data;
    const solver = kit.createSolver(challenge, bits);
    let reported = Date.now();
    for (;;) {
      const nonce = solver.step(16_384);
      if (nonce !== null) {
        scope.postMessage({ nonce, hashes: solver.hashes });
        return;
      }
      if (Date.now() - reported >= 100) {
        reported = Date.now();
        scope.postMessage({ progress: solver.hashes });
      }
    }
  };
  scope.postMessage({ ready: true });
}

const WORK_KIT = workSolverKit();

/** SHA-256 of `bytes` (a Uint8Array): the 32-byte digest. */
export const sha256 = WORK_KIT.sha256;
/** The midstate of `prefix`'s complete blocks: `{state, rest, length}`; see `sha256Finish`. */
export const sha256Midstate = WORK_KIT.midstate;
/** SHA-256 of the midstate's prefix followed by `tail`. */
export const sha256Finish = WORK_KIT.finish;
/** A stepwise search for a nonce (see `workSolverKit`). */
export const createWorkSolver = WORK_KIT.createSolver;
/** Whether `nonce` solves `challenge` at `bits`. */
export const workSolves = WORK_KIT.solves;

/** Solves `challenge` at `bits` here and now (blocking): `{nonce, hashes}`. */
export function solveWork(challenge, bits) {
  const solver = WORK_KIT.createSolver(challenge, bits);
  for (;;) {
    const nonce = solver.step(65_536);
    if (nonce !== null) return { nonce, hashes: solver.hashes };
  }
}

/** What the gateway's worker file (`/sdk/v1/sluice-work.js`) runs: `serveWork(self)`. */
export function serveWork(scope) {
  serveWorkIn(scope, WORK_KIT);
}

/** The source of a classic worker that solves, for a Blob URL (pages on another origin). */
export function workerSource() {
  return `"use strict";\nconst kit = (${workSolverKit})();\n(${serveWorkIn})(self, kit);\n`;
}

/** How long a worker may take to load before the solve runs elsewhere. */
const WORKER_START_MS = 5_000;
/** How long the main thread solves before it yields to the page, when no worker can run. */
export const MAIN_THREAD_SLICE_MS = 20;

/**
 * Solves off the main thread when it can: the gateway's worker file (a page on the gateway's
 * origin; a page's CSP that forbids `blob:` still allows it), else a Blob-URL worker (a page on
 * another origin may not start a worker from the gateway's URL), else the main thread in
 * slices of MAIN_THREAD_SLICE_MS that yield. `onStart(where)` names the place it runs
 * (`worker-file`, `worker-blob`, `main-thread`); `onProgress(hashes)` reports the count so far.
 * Returns `{promise, cancel}`; the promise resolves `{nonce, hashes, solver}`, or null once
 * cancelled.
 */
export function solveOffMainThread(env, challenge, bits, { onStart = () => {}, onProgress = () => {} } = {}) {
  let cancelled = false;
  let abandon = () => {};
  const WorkerImpl = env.Worker;

  function runWorker(where, create) {
    return new Promise((resolve) => {
      let worker;
      try {
        worker = create();
      } catch {
        resolve(undefined);
        return;
      }
      let timer = null;
      const finish = (value) => {
        if (timer !== null) env.clearTimer(timer);
        timer = null;
        abandon = () => {};
        try { worker.terminate(); } catch { /* gone already */ }
        resolve(value);
      };
      abandon = () => finish(null);
      timer = env.setTimer(() => { timer = null; finish(undefined); }, WORKER_START_MS);
      worker.onmessage = ({ data }) => {
        if (data?.ready) {
          if (timer !== null) env.clearTimer(timer);
          timer = null;
          onStart(where);
          worker.postMessage({ challenge, bits });
        } else if (typeof data?.nonce === "string") {
          finish({ nonce: data.nonce, hashes: data.hashes, solver: where });
        } else if (typeof data?.progress === "number") {
          onProgress(data.progress);
        }
      };
      // A worker that cannot load (CSP, no module workers, not served here) or fails: the
      // next way is tried.
      worker.onerror = (event) => {
        event?.preventDefault?.();
        finish(undefined);
      };
    });
  }

  const ways = [];
  if (typeof WorkerImpl === "function") {
    const moduleUrl = new URL(import.meta.url);
    const pageOrigin = env.location?.origin;
    if (pageOrigin && moduleUrl.origin === pageOrigin && /^https?:$/.test(moduleUrl.protocol)) {
      ways.push(["worker-file", () => new WorkerImpl(new URL("./sluice-work.js", moduleUrl), { type: "module" })]);
    }
    if (typeof Blob === "function" && typeof URL.createObjectURL === "function") {
      ways.push(["worker-blob", () => {
        const url = URL.createObjectURL(new Blob([workerSource()], { type: "text/javascript" }));
        try {
          return new WorkerImpl(url);
        } finally {
          // The worker has fetched its script by the time it runs; revoking later is enough.
          env.setTimer(() => URL.revokeObjectURL(url), WORKER_START_MS);
        }
      }]);
    }
  }

  async function onMainThread() {
    onStart("main-thread");
    const solver = WORK_KIT.createSolver(challenge, bits);
    for (;;) {
      const sliceEnd = env.clock() + MAIN_THREAD_SLICE_MS;
      do {
        const nonce = solver.step(1_024);
        if (nonce !== null) return { nonce, hashes: solver.hashes, solver: "main-thread" };
      } while (env.clock() < sliceEnd);
      onProgress(solver.hashes);
      await sleep(env, 0);
      if (cancelled) return null;
    }
  }

  const promise = (async () => {
    for (const [where, create] of ways) {
      if (cancelled) return null;
      const outcome = await runWorker(where, create);
      if (outcome !== undefined) return outcome;
    }
    if (cancelled) return null;
    return onMainThread();
  })();
  return {
    promise,
    cancel() {
      cancelled = true;
      abandon();
    },
  };
}
