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
  /** This subject's place in room `code`: the door (proof of work solved off the main
   *  thread), the join, the polls and the heartbeats. */
  room(code: string): RoomHandle;
}

/** A place's status on the server. */
export type PlaceStatus = "waiting" | "admitted" | "left" | "expired";

/** `idle` before start(); `joining` while asking the door for a challenge or joining;
 *  `solving` while the proof of work runs; `error` while unable to join for now (retried by
 *  itself) or after a refusal for good (`error.retryable` false). */
export type RoomState = PlaceStatus | "idle" | "joining" | "solving" | "error";

export declare const PLACE_STATUSES: readonly PlaceStatus[];
export declare const PLACE_FINAL: readonly PlaceStatus[];

/** Where a solve ran: the gateway's worker file (a page on the gateway's origin), a Blob-URL
 *  worker (a page on another origin), or the main thread in 20 ms slices (no worker could
 *  start: CSP, an old browser). */
export type SolverPlace = "worker-file" | "worker-blob" | "main-thread";

/** The door's proof of work: its difficulty, the nonces tried (so far, while solving), the
 *  time it took and where it ran (null until a worker or the main thread started). */
export interface Work {
  bits: number;
  hashes: number;
  ms: number;
  solver: SolverPlace | null;
}

export interface RoomSnapshot {
  state: RoomState;
  room: string;
  /** The place's id (the pass's `jti`), once joined. */
  joinId: string | null;
  /** Places ahead not admitted yet, while waiting. */
  position: number | null;
  etaSeconds: number | null;
  opensAt: string | null;
  /** The pass (a JWT for the protected origin) while admitted. */
  pass: string | null;
  passExpiresAt: string | null;
  updatedAt: string | null;
  /** The solve that bought the place (kept across a reload), or null (no proof asked). */
  work: Work | null;
  error: SluiceError | null;
}

export interface RoomHandle {
  readonly state: RoomState;
  readonly snapshot: RoomSnapshot;
  readonly pass: string | null;
  readonly passExpiresAt: string | null;
  /** Joins once (the solution, then the ticket, stored as soon as known) or continues the
   *  stored place: a reload polls it, no new challenge, solve or join. */
  start(): boolean;
  /** Continues a stored place or join; false when there is none. */
  resume(): boolean;
  /** Stops observing and solving; the place stays at the gateway. */
  stop(): void;
  /** Gives the place back (the pass while admitted, else the ticket); safe to repeat. */
  leave(): Promise<RoomSnapshot>;
  /** Forgets an ended place (or a join refused for good): start() joins anew. */
  clear(): void;
  subscribe(listener: (snapshot: RoomSnapshot) => void): () => void;
}

export interface ClientOptions {
  baseUrl: string;
  /** A subject token, or a function returning a fresh one (asked again near expiry or on 401). */
  token: string | (() => string | Promise<string>);
  /** Where intents are kept across reloads; sessionStorage by default. */
  storage?: Storage;
  /** A request abandoned after this long counts as a network error (default 15 s). */
  requestTimeoutMs?: number;
  /** The Worker constructor the solve uses (default globalThis.Worker; null: main thread). */
  Worker?: typeof Worker | null;
}

export declare function createClient(options: ClientOptions): Client;
export declare function backoffMs(attempt: number, retryAfterMs: number | null, random?: () => number): number;
export declare function pollDelayMs(advisedMs: number | undefined, hidden: boolean, random?: () => number): number;
export declare function tokenClaims(token: string): { sub: string; exp: number } | null;
export declare function newRequestKey(): string;

/** The midstate after `prefix`'s complete 64-byte blocks, and what is left of it. */
export interface Sha256Midstate {
  state: Int32Array;
  rest: Uint8Array;
  length: number;
}

/** SHA-256, pure and synchronous (the solver's own; WebCrypto's is one promise per hash). */
export declare function sha256(bytes: Uint8Array): Uint8Array;
export declare function sha256Midstate(prefix: Uint8Array): Sha256Midstate;
export declare function sha256Finish(midstate: Sha256Midstate, tail: Uint8Array): Uint8Array;
/** A stepwise search: `step(n)` tries up to n nonces, answering the solution or null. */
export declare function createWorkSolver(challenge: string, bits: number, first?: number): {
  hashes: number;
  step(limit: number): string | null;
};
/** Solves at once, blocking: the nonce and the hashes it took. */
export declare function solveWork(challenge: string, bits: number): { nonce: string; hashes: number };
/** Whether SHA-256 of `challenge:nonce` begins with `bits` zero bits. */
export declare function workSolves(challenge: string, nonce: string, bits: number): boolean;
/** The source of the classic worker a Blob URL runs. */
export declare function workerSource(): string;
/** What the gateway's worker file runs. */
export declare function serveWork(scope: { postMessage(message: unknown): void; onmessage: unknown }): void;
export declare const MAIN_THREAD_SLICE_MS: number;
/** The solver's functions, self-contained (a Blob worker runs their source). */
export declare function workSolverKit(): {
  sha256: typeof sha256;
  midstate: typeof sha256Midstate;
  finish: typeof sha256Finish;
  createSolver: typeof createWorkSolver;
  solves: typeof workSolves;
  ascii(text: string): Uint8Array;
};
export declare function serveWorkIn(scope: { postMessage(message: unknown): void; onmessage: unknown }, kit: ReturnType<typeof workSolverKit>): void;
