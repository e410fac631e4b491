// Types of the Sluice browser client's waiting rooms (rooms.js). rooms.js re-exports everything
// of sluice.js and work.js, and so do these types.

import type { Client, ClientOptions, SluiceError } from "./sluice.js";
import type { SolverPlace } from "./work.js";

export * from "./sluice.js";
export * from "./work.js";

/** A place's status on the server. */
export type PlaceStatus = "waiting" | "admitted" | "left" | "expired";

/** `idle` before start(); `joining` while asking the door for a challenge or joining;
 *  `solving` while the proof of work runs; `error` while unable to join for now (retried by
 *  itself) or after a refusal for good (`error.retryable` false). */
export type RoomState = PlaceStatus | "idle" | "joining" | "solving" | "error";

export declare const PLACE_STATUSES: readonly PlaceStatus[];
export declare const PLACE_FINAL: readonly PlaceStatus[];

/** The door's proof of work: its difficulty, the nonces tried (so far, while solving), the
 *  time it took and where it ran (null until a worker or the main thread started). */
export interface Work {
  bits: number;
  hashes: number;
  ms: number;
  solver: SolverPlace | null;
}

/** One frozen object per change, like a command's `Snapshot` (its `work` frozen too). */
export interface RoomSnapshot {
  readonly state: RoomState;
  readonly room: string;
  /** The place's id (the pass's `jti`), once joined. */
  readonly joinId: string | null;
  /** Places ahead not admitted yet, while waiting. */
  readonly position: number | null;
  readonly etaSeconds: number | null;
  readonly opensAt: string | null;
  /** The pass (a JWT for the protected origin) while admitted. */
  readonly pass: string | null;
  readonly passExpiresAt: string | null;
  readonly updatedAt: string | null;
  /** The solve that bought the place (kept across a reload), or null (no proof asked). */
  readonly work: Readonly<Work> | null;
  readonly error: SluiceError | null;
}

export interface RoomHandle {
  readonly state: RoomState;
  /** The same frozen object until the place changes. */
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


/** sluice.js's client with `room(code)`. */
export interface RoomsClient extends Client {
  /** This subject's place in room `code`: the door (proof of work solved off the main
   *  thread), the join, the polls and the heartbeats. */
  room(code: string): RoomHandle;
}

/** sluice.js's `createClient` (same options), whose client also has `room(code)`. */
export declare function createClient(options: ClientOptions): RoomsClient;
/** The place in room `code` of the subject of a client made by either `createClient`. */
export declare function room(client: Client, code: string): RoomHandle;
