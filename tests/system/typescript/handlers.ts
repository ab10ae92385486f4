// A webhook receiver's handler of every event, typed by the client that openapi-typescript
// generates from the service's OpenAPI document (api.d.ts, written beside this file by
// tests/system/test_typescript_client.py). A delivery's body is a WebhookEvent, the union of
// every event; switching on `event` narrows `data` to that event's fields.
import type { components, operations } from "./api";

type Event = components["schemas"]["WebhookEvent"];
type EventLogPage = operations["listEvents"]["responses"][200]["content"]["application/json"];

export function describe(event: Event): string {
  switch (event.event) {
    case "call.started":
      return `${event.data.callerNumber} called ${event.data.did} (${event.data.phoneNumberId}, ${event.data.callId})`;
    case "call.answered":
      return `${event.data.agentId} answered ${event.data.callId}, started ${event.data.startedAt}`;
    case "call.ended": {
      const billable: number = event.data.talkTimeSeconds;
      const cost: number = event.data.aiCostIdr;
      // Null when the runtime reported none; absent from events recorded before they existed.
      const recording: string = event.data.recordingUrl ?? "no recording";
      const model: number = event.data.costBreakdown?.llm ?? 0;
      return `${event.data.callId} from ${event.data.callerNumber} to ${event.data.calleeNumber} ended (${event.data.hangupReason}, by ${event.data.hangupInitiator}) after ${event.data.durationSeconds} s: ${billable} s talk, IDR ${cost} (${model} for the model), ${recording}`;
    }
    case "call.transcript":
      return `${event.data.callId}: ${event.data.transcriptSummary}`;
    case "credits.low": {
      const left: number = event.data.balanceMinutes;
      return `${left} minutes left, below ${event.data.threshold}`;
    }
    case "function.called":
      return `${event.data.callId}: ${event.data.functionName}(${JSON.stringify(event.data.parameters)}) → ${JSON.stringify(event.data.result)}`;
    case "webhook.test":
      return `${event.data.webhookId}: ${event.data.message}`;
    case "campaign.completed": {
      const { completed, failed, total } = event.data.counts;
      return `${event.data.name} (${event.data.campaignId}) done at ${event.data.completedAt}: ${completed} completed, ${failed} failed of ${total}`;
    }
    case "call.analyzed": {
      const verdict: boolean | null = event.data.successful;
      const fields: string = JSON.stringify(event.data.fields);
      return `${event.data.callId} (${event.data.agentId} v${event.data.agentVersion}) analysed: ${event.data.status}, successful ${verdict}, ${fields}, IDR ${event.data.costIdr}`;
    }
    default: {
      // Every event is handled above: a new one makes this assignment a type error.
      const unhandled: never = event;
      return unhandled;
    }
  }
}

// The event log holds the same events: a page's are handled alike.
export function describePage(page: EventLogPage): string[] {
  return page.events.map(describe);
}

// A delivery's raw body, parsed.
export function describeBody(body: string): string {
  return describe(JSON.parse(body) as Event);
}

// A delivery's body is one event's own schema, too.
export function minutesBilled(body: components["schemas"]["CallEndedEvent"]): number {
  return Math.ceil(body.data.talkTimeSeconds / 60);
}
