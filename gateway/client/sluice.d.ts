// Types of the Sluice browser client (sluice.js).

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

export interface Snapshot {
  state: State;
  commandId: string | null;
  /** Commands ahead in the queue, while waiting. */
  position: number | null;
  etaSeconds: number | null;
  updatedAt: string | null;
  result: unknown;
  error: SluiceError | null;
}

export interface CommandHandle {
  readonly state: State;
  readonly snapshot: Snapshot;
  /** Creates the intent once (a fresh request key stored before the first request), or
   *  continues the stored one. */
  start(): boolean;
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
  command(code: string, options: { key: string; input?: unknown }): CommandHandle;
}

export interface ClientOptions {
  baseUrl: string;
  /** A subject token, or a function returning a fresh one (asked again near expiry or on 401). */
  token: string | (() => string | Promise<string>);
  /** Where intents are kept across reloads; sessionStorage by default. */
  storage?: Storage;
  /** A request abandoned after this long counts as a network error (default 15 s). */
  requestTimeoutMs?: number;
}

export declare function createClient(options: ClientOptions): Client;
export declare function backoffMs(attempt: number, retryAfterMs: number | null, random?: () => number): number;
export declare function pollDelayMs(advisedMs: number | undefined, hidden: boolean, random?: () => number): number;
export declare function tokenClaims(token: string): { sub: string; exp: number } | null;
export declare function newRequestKey(): string;
