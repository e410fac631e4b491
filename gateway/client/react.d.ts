// Types of the Sluice browser client's React hook (react.js). React is a peer dependency.

import type { Client, CommandHandle, Snapshot } from "./sluice.js";

export interface UseSluiceCommandOptions {
  /** Names the intent in this page: the same key after a reload is the same intent. */
  key: string;
  /** The command's input, read when the intent is created (`autoStart` or `start()`). */
  input?: unknown;
  /** Creates the intent on mount when none is stored (default false: `start()` does). */
  autoStart?: boolean;
}

/** The handle's snapshot, with what the component may do with the intent. */
export interface SluiceCommand extends Snapshot {
  /** The handle the hook follows (one per client, code and key). */
  readonly handle: CommandHandle;
  /** Creates the intent from the latest `input`, or continues the stored one; takes no
   *  argument, so it can be an event handler. */
  start(): boolean;
  /** Asks the gateway to cancel. */
  cancel(): Promise<Snapshot>;
  /** Forgets an ended intent. */
  clear(): void;
}

/** One intent of command `code`, rendered once per change of its snapshot; a stored intent is
 *  resumed on mount, and unmounting stops observing (never cancels). */
export declare function useSluiceCommand(
  client: Client,
  code: string,
  options: UseSluiceCommandOptions,
): SluiceCommand;
