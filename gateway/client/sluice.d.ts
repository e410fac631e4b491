// Types of the Sluice browser client (sluice.js): commands, allocations and reads. Waiting
// rooms are in rooms.d.ts, the proof-of-work solver in work.d.ts, the React hook in react.d.ts.

export type Status =
  | "accepted" | "executing" | "running" | "retry_wait"
  | "succeeded" | "rejected" | "failed" | "expired" | "cancelled" | "needs_review";

/** `idle` before start(); `recovering` while an enqueue of unknown outcome is sent again with
 *  the same key; `error` while unable to confirm (the key is kept) or after a refusal for good. */
export type State = Status | "idle" | "recovering" | "error";

export declare const STATUSES: readonly Status[];
export declare const FINAL: readonly Status[];
export declare const MAX_BACKOFF_MS: number;
export declare const FIRST_BACKOFF_MS: number;
export declare const DEFAULT_POLL_MS: number;
export declare const REQUEST_TIMEOUT_MS: number;

export declare class SluiceError extends Error {
  /** The API's error code (`UNAVAILABLE`, `RATE_LIMITED`, …) or the client's own
   *  (`NETWORK`, `STORAGE_UNAVAILABLE`, `SUBJECT_CHANGED`, `INVALID_ARGUMENT`, `STATE_CONFLICT`). */
  readonly code: string;
  readonly status: number;
  /** True when the client will try again by itself. */
  retryable: boolean;
  readonly retryAfterMs: number | null;
  /** The API's `error.details` when it sent one, e.g. `{ state: "expired" }` on the
   *  `409 STATE_CONFLICT` of `confirm()` or `release()`. */
  readonly details: Record<string, unknown> | null;
}

/** `reserved` until exactly one of the other three; a decided state never changes. */
export type AllocationState = "reserved" | "confirmed" | "released" | "expired";

export declare const ALLOCATION_STATES: readonly AllocationState[];

/** An allocation's current truth (`GET /v1/allocations/{id}`). */
export interface Allocation {
  allocation_id: string;
  pool: string;
  /** The holder: the only subject who may confirm or release it. */
  subject: string;
  command_id: string;
  state: AllocationState;
  /** When the reservation lapses (or lapsed); only while `reserved` and once `expired`. */
  expires_at?: string;
  created_at: string;
  updated_at: string;
}

/** The answer to `confirm()` and `release()`: the allocation, and whether this call decided it
 *  (false: a repeat of the action that already had). */
export interface AllocationDecision extends Allocation {
  changed: boolean;
}

/** What a handle shows: one frozen object per change (`handle.snapshot` returns the same object
 *  until something in it changes), so it can be compared by identity. */
export interface Snapshot {
  readonly state: State;
  readonly commandId: string | null;
  /** Commands ahead in the queue, while waiting. */
  readonly position: number | null;
  readonly etaSeconds: number | null;
  readonly updatedAt: string | null;
  readonly result: unknown;
  readonly error: SluiceError | null;
}

/** What a command is asked for: `key` names the intent in this page (the same key after a
 *  reload is the same intent, 1 to 200 characters); `input` is the command's input, needed to
 *  create the intent (not to resume a stored one). */
export interface CommandOptions {
  key: string;
  input?: unknown;
}

export interface CommandHandle {
  readonly state: State;
  /** The same frozen object until the state changes. */
  readonly snapshot: Snapshot;
  /** Creates the intent once (a fresh request key stored before the first request), or
   *  continues the stored one. `input` replaces the one given to `command()` for a new intent;
   *  a stored intent keeps its own. */
  start(input?: unknown): boolean;
  /** Continues a stored intent after a reload; false when there is none. */
  resume(): boolean;
  /** Stops observing; never cancels. */
  stop(): void;
  /** Asks the gateway to cancel; a started command records the intent only. */
  cancel(): Promise<Snapshot>;
  /** Forgets the intent; only from a final status (or a refusal for good). */
  clear(): void;
  /** Called with every change and once at once; returns the unsubscribe. */
  subscribe(listener: (snapshot: Snapshot) => void): () => void;
}

export interface ReadAnswer {
  items: unknown[];
  generated_at: string;
  fresh_until: string;
  stale_until: string;
  version: string;
  freshness: "fresh" | "stale";
}

export interface Client {
  readonly subject: string | null;
  read(name: string, params?: Record<string, string>): Promise<ReadAnswer>;
  /** The allocation's state now; the holder's own only. */
  allocation(id: string): Promise<Allocation>;
  /** Keeps a reserved unit. Released or expired first: rejects with `STATE_CONFLICT`,
   *  `details.state` saying which. Safe to repeat. */
  confirm(id: string): Promise<AllocationDecision>;
  /** Gives a reserved unit back. Confirmed or expired first: rejects with `STATE_CONFLICT`,
   *  `details.state` saying which. Safe to repeat. */
  release(id: string): Promise<AllocationDecision>;
  /** A handle on one intent of command `code` (a declared command code). */
  command(code: string, options: CommandOptions): CommandHandle;
}

/** What the client keeps intents in: sessionStorage, or anything with these three methods. */
export type StorageLike = Pick<Storage, "getItem" | "setItem" | "removeItem">;

/** The page's visibility, read to slow polls in a hidden tab. */
export interface DocumentLike {
  readonly visibilityState: DocumentVisibilityState | string;
  addEventListener(type: "visibilitychange", listener: () => void): void;
  removeEventListener(type: "visibilitychange", listener: () => void): void;
}

/** The constructor of a module or classic Web Worker. */
export type WorkerConstructor = new (url: string | URL, options?: WorkerOptions) => Worker;

export interface ClientOptions {
  /** The gateway, e.g. "https://gateway.example" (http or https). */
  baseUrl: string;
  /** A subject token, or a function returning a fresh one (asked again near expiry or on 401). */
  token: string | (() => string | Promise<string>);
  /** Where intents are kept across reloads; sessionStorage by default. A storage that refuses
   *  a write makes `createClient` throw `STORAGE_UNAVAILABLE`. */
  storage?: StorageLike | null;
  /** A request abandoned after this long counts as a network error (default 15 s). */
  requestTimeoutMs?: number;
  /** The fetch the client sends its requests with (default globalThis.fetch). */
  fetch?: (input: string, init: RequestInit) => Promise<Pick<Response, "status" | "json"> & {
    headers?: { get(name: string): string | null };
  }>;
  /** The timers the client waits with (default the global ones). */
  setTimeout?: (callback: () => void, ms: number) => unknown;
  clearTimeout?: (timer: any) => void;
  /** Draws in [0, 1) for the jitter of backoffs and polls (default Math.random). */
  random?: () => number;
  /** The wall clock in milliseconds (default Date.now): token expiry, a challenge's expiry. */
  now?: () => number;
  /** A monotonic clock in milliseconds (default performance.now): how long a solve took. */
  clock?: () => number;
  /** Whose visibility slows polls in a hidden tab (default globalThis.document; null: none). */
  document?: DocumentLike | null;
  /** The Worker constructor a room's solve uses (default globalThis.Worker; null: the main
   *  thread). Read by rooms.js. */
  Worker?: WorkerConstructor | null;
  /** The page's location, whose origin says whether the gateway's worker file may start
   *  (default globalThis.location). Read by rooms.js. */
  location?: { readonly origin: string } | null;
}

export declare function createClient(options: ClientOptions): Client;
export declare function backoffMs(attempt: number, retryAfterMs: number | null, random?: () => number): number;
export declare function pollDelayMs(advisedMs: number | undefined, hidden: boolean, random?: () => number): number;
export declare function tokenClaims(token: string): { sub: string; exp: number } | null;
export declare function newRequestKey(): string;

/** What the package's other entries (rooms.js) build on. Not for applications: it changes with
 *  the package, without notice. */
export declare const _internals: {
  readonly StoredHandle: new (...args: any[]) => object;
  readonly refusal: (answer: unknown) => SluiceError;
  readonly sleep: (env: unknown, ms: number) => Promise<void>;
  readonly MAX_ATTEMPTS: number;
  readonly STORAGE_PREFIX: string;
  partsOf(client: Client): unknown;
};
