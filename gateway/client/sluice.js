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
// - a handle's `snapshot` is one frozen object per change, so a renderer that compares by
//   identity (React's `useSyncExternalStore`, react.js) renders once per change.
//
// Waiting rooms and their proof of work are an entry of their own (rooms.js, work.js): this file
// imports nothing, so a page that only claims loads neither.

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
/** Each client's parts, for the handles of the package's other entries (`_internals.partsOf`). */
const CLIENT_PARTS = new WeakMap();

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
  };
  CLIENT_PARTS.set(client, {
    env,
    call,
    subject: () => subject,
    adopt(handle) {
      handles.add(handle);
      return handle;
    },
  });
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
    this._snapshot = Object.freeze({ ...current, ...patch });
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

  /**
   * Creates the intent once (or continues the stored one) and follows it. `input`, when given,
   * is the new intent's input in place of the one given to `command()`; a stored intent keeps
   * the input it was created with.
   */
  start(input = this._input) {
    const stored = this._load();
    if (stored) return this.resume();
    if (input === undefined) {
      throw new SluiceError("INVALID_ARGUMENT", "start() needs the command's input");
    }
    // Stored before the first request: whatever happens next, this key is the intent.
    this._save({ requestKey: newRequestKey(), input });
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

/**
 * What the package's other entries (rooms.js) build their handles on: the handle base class,
 * the helpers and a client's parts (its environment, its API call, its subject, and `adopt`,
 * which makes a handle stop with the others when the token names another subject). Not for
 * applications: it changes with the package, without notice.
 */
export const _internals = Object.freeze({
  StoredHandle,
  refusal,
  sleep,
  MAX_ATTEMPTS,
  STORAGE_PREFIX,
  partsOf(client) {
    const parts = CLIENT_PARTS.get(client);
    if (!parts) throw new SluiceError("INVALID_ARGUMENT", "not a client made by createClient()");
    return parts;
  },
});
