// Types of the Sluice browser client's proof-of-work solver (work.js), re-exported by rooms.js.

/** Where a solve ran: the gateway's worker file (a page on the gateway's origin), a Blob-URL
 *  worker (a page on another origin), or the main thread in 20 ms slices (no worker could
 *  start: CSP, an old browser). */
export type SolverPlace = "worker-file" | "worker-blob" | "main-thread";

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

/** What a solve off the main thread reads of the client's environment. */
export interface SolveEnvironment {
  Worker?: (new (url: string | URL, options?: WorkerOptions) => Worker) | null;
  location?: { readonly origin: string } | null;
  setTimer(callback: () => void, ms: number): unknown;
  clearTimer(timer: any): void;
  clock(): number;
}

/** Solves in the gateway's worker file, else a Blob-URL worker, else the main thread in slices
 *  that yield; the promise resolves null once cancelled. */
export declare function solveOffMainThread(
  env: SolveEnvironment,
  challenge: string,
  bits: number,
  callbacks?: { onStart?: (where: SolverPlace) => void; onProgress?: (hashes: number) => void },
): {
  promise: Promise<{ nonce: string; hashes: number; solver: SolverPlace } | null>;
  cancel(): void;
};
