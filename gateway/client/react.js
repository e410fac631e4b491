// Sluice browser client, React: `useSluiceCommand` renders one intent of a command through its
// whole life (enqueue, waiting with a position, the result), on the handle of sluice.js.
//
//   import { createClient } from "@sluice/client";
//   import { useSluiceCommand } from "@sluice/client/react";
//
//   const client = createClient({ baseUrl, token });            // once, outside the component
//   function Buy({ offer }) {
//     const claim = useSluiceCommand(client, "claim", { key: `offer-${offer}`, input: { offer } });
//     if (claim.state === "idle") return <button onClick={claim.start}>Buy</button>;
//     return <p>{claim.state} {claim.position ?? ""}</p>;
//   }
//
// React is a peer dependency (imported as "react", never bundled here): an application's bundler
// resolves it, or an import map where the module is loaded as is (`/sdk/v1/react.js`).
//
// What it promises (and its tests check, in Chromium under <StrictMode>):
// - the component renders once per change of the handle's snapshot: `useSyncExternalStore`
//   reads `handle.snapshot`, one frozen object per change, never a loop;
// - one command per key: the handle keeps the intent's request key in storage before the first
//   request, so StrictMode's second run of the effect, a remount or a reload continues the same
//   intent and never enqueues it twice;
// - unmounting stops observing (the command goes on at the gateway) and never cancels.

import { useCallback, useEffect, useMemo, useRef, useSyncExternalStore } from "react";

/**
 * One intent of command `code` for the subject of `client` (made once by sluice.js's
 * `createClient`, not on every render), named by `key` (the same key after a reload is the same
 * intent). Returns the handle's snapshot (`state`, `position`, `etaSeconds`, `result`, `error`,
 * …) with `start()`, `cancel()`, `clear()` and the `handle` itself.
 *
 * On mount a stored intent is resumed; with `autoStart` a new one is created from `input`.
 * `start()` (it takes no argument, so it can be an event handler) creates the intent from the
 * latest `input` or continues the stored one, which keeps the input it was created with. A new `client`, `code` or `key` follows another intent.
 */
export function useSluiceCommand(client, code, { key, input, autoStart = false } = {}) {
  const handle = useMemo(() => client.command(code, { key, input }), [client, code, key]);
  const latestInput = useRef(input);
  latestInput.current = input;

  const subscribe = useCallback((onChange) => handle.subscribe(onChange), [handle]);
  const read = useCallback(() => handle.snapshot, [handle]);
  const snapshot = useSyncExternalStore(subscribe, read, read);

  useEffect(() => {
    if (!handle.resume() && autoStart && latestInput.current !== undefined) {
      handle.start(latestInput.current);
    }
    return () => handle.stop();
  }, [handle, autoStart]);

  const start = useCallback(() => handle.start(latestInput.current), [handle]);
  const cancel = useCallback(() => handle.cancel(), [handle]);
  const clear = useCallback(() => handle.clear(), [handle]);
  return { ...snapshot, handle, start, cancel, clear };
}
