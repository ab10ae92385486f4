// One deliberate type error: a call.started event has no durationSeconds. tsc must refuse
// this file, or the type check of handlers.ts could not fail either.
import type { components } from "./api";

export function duration(event: components["schemas"]["WebhookEvent"]): number {
  if (event.event === "call.started") {
    return event.data.durationSeconds;
  }
  return 0;
}
