// What an application writes with the package, checked by tsc (tsconfig.json beside it): the
// claims and rooms entries, every option of createClient and command(), and what the types
// must refuse (each marked as an expected error). The React hook is in usage-react.tsx.
// Never run: tsc --noEmit only.

import {
  ALLOCATION_STATES, FINAL, SluiceError, STATUSES, backoffMs, createClient, newRequestKey, pollDelayMs, tokenClaims,
  type Client, type ClientOptions, type CommandHandle, type CommandOptions, type Snapshot, type State,
} from "@sluice/client";
import {
  PLACE_FINAL, createClient as createRoomsClient, room, solveWork, workSolves, workerSource,
  type RoomHandle, type RoomSnapshot, type SolverPlace,
} from "@sluice/client/rooms";
import pkg from "@sluice/client/package.json" with { type: "json" };

const storage = new Map<string, string>();
const options: ClientOptions = {
  baseUrl: "https://gateway.example",
  token: async () => "a subject token",
  storage: {
    getItem: (key) => storage.get(key) ?? null,
    setItem: (key, value) => { storage.set(key, value); },
    removeItem: (key) => { storage.delete(key); },
  },
  requestTimeoutMs: 10_000,
  fetch: (input, init) => fetch(input, init),
  setTimeout: (callback, ms) => setTimeout(callback, ms),
  clearTimeout: (timer) => clearTimeout(timer),
  random: Math.random,
  now: () => Date.now(),
  clock: () => performance.now(),
  document: null,
  Worker: null,
  location: { origin: "https://shop.example" },
};
const client: Client = createClient(options);

// @ts-expect-error an option the client does not take
createClient({ baseUrl: "https://gateway.example", token: "t", retries: 3 });
// @ts-expect-error a token is a string or a function returning one
createClient({ baseUrl: "https://gateway.example", token: 42 });

const intent: CommandOptions = { key: "offer-0b0c8f5e", input: { offer: "0b0c8f5e" } };
const order: CommandHandle = client.command("claim", intent);
// @ts-expect-error the key names the intent: it is required
client.command("claim", { input: {} });
order.start();
order.start({ offer: "another" });
const unsubscribe: () => void = order.subscribe((snapshot: Snapshot) => {
  const state: State = snapshot.state;
  const waiting: number | null = snapshot.position;
  if (snapshot.error instanceof SluiceError && !snapshot.error.retryable) console.log(snapshot.error.code, state, waiting);
});
unsubscribe();
// @ts-expect-error a snapshot is frozen: its fields are read-only
order.snapshot.state = "succeeded";
const stopped: boolean = order.resume();
order.stop();
void order.cancel().then((after) => after.commandId);
if (FINAL.includes(order.state as (typeof FINAL)[number])) order.clear();

void client.read("offers", { near: "paris" }).then((answer) => answer.freshness);
void client.allocation("00000000-0000-0000-0000-000000000000").then((a) => a.state === ALLOCATION_STATES[0]);
void client.confirm("00000000-0000-0000-0000-000000000000").then((d) => d.changed);
void client.release("00000000-0000-0000-0000-000000000000").then((d) => d.expires_at);
const waits: number[] = [backoffMs(0, null), pollDelayMs(undefined, false), STATUSES.length];
const claims = tokenClaims(newRequestKey());
// @ts-expect-error the claims-only client has no rooms: they are in "@sluice/client/rooms"
client.room("doors");

const doors: RoomHandle = createRoomsClient(options).room("doors");
const alsoDoors: RoomHandle = room(client, "doors");
doors.subscribe((snapshot: RoomSnapshot) => {
  const where: SolverPlace | null = snapshot.work?.solver ?? null;
  console.log(snapshot.state, snapshot.position, snapshot.pass, where);
});
doors.start();
void alsoDoors.leave().then((snapshot) => PLACE_FINAL.includes(snapshot.state as (typeof PLACE_FINAL)[number]));
const { nonce } = solveWork("challenge", 8);
const solved: boolean = workSolves("challenge", nonce, 8) && workerSource().length > 0;

export const used = [stopped, waits, claims, solved, pkg.version];
