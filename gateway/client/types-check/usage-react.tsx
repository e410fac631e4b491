// The React hook as a component uses it, checked by tsc against React's own types
// (@types/react): its result renders, `start` is a click handler, the component mounts in
// <StrictMode>. Never run: tsc --noEmit only.

import { StrictMode, type ReactElement } from "react";
import { createClient } from "@sluice/client";
import { useSluiceCommand, type SluiceCommand, type UseSluiceCommandOptions } from "@sluice/client/react";

const client = createClient({ baseUrl: "https://gateway.example", token: "a subject token" });

function Buy({ offer }: { offer: string }): ReactElement {
  const options: UseSluiceCommandOptions = { key: `offer-${offer}`, input: { offer }, autoStart: false };
  const claim: SluiceCommand = useSluiceCommand(client, "claim", options);
  if (claim.state === "idle") return <button type="button" onClick={claim.start}>Buy</button>;
  if (claim.state === "succeeded") return <pre>{JSON.stringify(claim.result)}</pre>;
  if (claim.error && !claim.error.retryable) {
    return <p role="alert">{claim.error.message} <button type="button" onClick={claim.clear}>Again</button></p>;
  }
  return (
    <p>
      {claim.state} {claim.position ?? ""} {claim.etaSeconds ?? ""}
      <button type="button" onClick={() => void claim.cancel()}>Cancel</button>
    </p>
  );
}

function Wrong(): null {
  // @ts-expect-error the hook needs the intent's key
  useSluiceCommand(client, "claim", { input: {} });
  // @ts-expect-error an option the hook does not take
  useSluiceCommand(client, "claim", { key: "k", start: true });
  const claim = useSluiceCommand(client, "claim", { key: "k" });
  // @ts-expect-error what the hook shows is read-only
  claim.state = "idle";
  return null;
}

export const app: ReactElement = <StrictMode><Buy offer="0b0c8f5e" /><Wrong /></StrictMode>;
