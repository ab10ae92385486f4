"""What every event carries in `data`, exactly as its deliveries send it: one schema per event,
the events as one union discriminated by their name (Event in the event log, WebhookEvent for
a receiver), and the deliveries as OpenAPI callbacks.

EVENT_DATA is the one place an event's fields are named: the event log (GET /events) dumps
each event with its schema, and the OpenAPI document describes each from it, so a generated
client reads an event's data as a typed model. An event added to the service needs its schema
here (tests/resources/test_event_payloads.py fails until it has one).
"""

from typing import Any

import marshmallow as ma
from marshmallow import fields, validate
from marshmallow_oneofschema import OneOfSchema

from app.resources.common import Schema
from app.resources.events.deliveries import DeliverySchema
from app.services.calls.analysis import STATUSES as ANALYSIS_STATUSES
from app.services.calls.constants import DIRECTIONS

INTEGER_IDR = "IDR, a whole number."


class DataSchema(Schema):
    """The schema of an event's data, which is stored as it is sent: its values are read by
    their names on the wire (callId), not by the fields' own (call_id)."""

    def on_bind_field(self, field_name: str, field_obj: fields.Field) -> None:
        super().on_bind_field(field_name, field_obj)
        field_obj.attribute = field_obj.data_key


class CallStartedDataSchema(DataSchema):
    call_id = fields.String(required=True, metadata={"description": "call_…"})
    phone_number_id = fields.String(
        required=True, metadata={"description": "pn_…: the number that was called."}
    )
    caller_number = fields.String(
        required=True, metadata={"description": "Who called, in international format."}
    )
    did = fields.String(
        required=True,
        metadata={"description": "The number called (its displayNumber), with a leading +."},
    )


class CallAnsweredDataSchema(DataSchema):
    call_id = fields.String(required=True, metadata={"description": "call_…"})
    agent_id = fields.String(required=True, metadata={"description": "agent_…: who answered."})
    started_at = fields.String(
        required=True,
        metadata={
            "description": "When the call started: ISO 8601 UTC with milliseconds.",
            "format": "date-time",
        },
    )


class CallEndedDataSchema(DataSchema):
    call_id = fields.String(required=True, metadata={"description": "call_…"})
    duration_seconds = fields.Integer(
        required=True, metadata={"description": "From the start to the end, in seconds."}
    )
    hangup_reason = fields.String(
        required=True,
        metadata={
            "description": "Why it ended: normal, or e.g. no_agent, no_credits when it was "
            "turned away at its start."
        },
    )
    phone_number_id = fields.String(required=True, metadata={"description": "pn_…"})
    caller_number = fields.String(
        required=True, metadata={"description": "The calling number, international format."}
    )
    callee_number = fields.String(
        required=True, metadata={"description": "The called number, international format."}
    )
    talk_time_seconds = fields.Integer(
        required=True, metadata={"description": "Seconds of conversation: what is billed."}
    )
    hangup_initiator = fields.String(
        required=True, metadata={"description": "Who hung up: caller, agent or system."}
    )
    ai_cost_idr = fields.Integer(
        required=True, metadata={"description": "The AI cost of the call, " + INTEGER_IDR}
    )
    # Added to call.ended later: an event recorded before (still in the log, or replayed)
    # does not have them, so they are not required.
    recording_url = fields.String(
        allow_none=True,
        metadata={
            "description": "The recording's https URL, or null when the runtime reported none "
            "(absent from events recorded before the service had it)."
        },
    )
    cost_breakdown = fields.Nested(
        "CallCostsSchema",
        allow_none=True,
        metadata={
            "description": "aiCostIdr by component, or null when the runtime reported none "
            "(absent from events recorded before the service had it)."
        },
    )
    agent_version = fields.Integer(
        allow_none=True,
        metadata={
            "description": "The version of the agent the call was answered with, or null when "
            "no agent took it (absent from events recorded before the service had versions)."
        },
    )
    agent_id = fields.String(
        allow_none=True,
        metadata={
            "description": "agent_…: the agent of the call, or null when the number had none "
            "(absent from events recorded before the service sent it)."
        },
    )
    direction = fields.String(
        validate=validate.OneOf(DIRECTIONS),
        metadata={
            "description": "inbound or outbound (absent from events recorded before the "
            "service sent it).",
            "enum": DIRECTIONS,
        },
    )
    campaign_id = fields.String(
        allow_none=True,
        metadata={
            "description": "cmp_…: the campaign that placed the call, or null (absent from "
            "events recorded before the service sent it)."
        },
    )


class CallCostsSchema(DataSchema):
    """A call's AI cost by component, IDR (a component the runtime did not report is 0)."""

    llm = fields.Integer(required=True, metadata={"description": "Language model."})
    stt = fields.Integer(required=True, metadata={"description": "Speech to text."})
    tts = fields.Integer(required=True, metadata={"description": "Text to speech."})
    telephony = fields.Integer(required=True, metadata={"description": "The phone line."})
    other = fields.Integer(required=True, metadata={"description": "Anything else."})


class CallTranscriptDataSchema(DataSchema):
    call_id = fields.String(required=True, metadata={"description": "call_…"})
    transcript_summary = fields.String(
        required=True, metadata={"description": "The summary of the conversation."}
    )


class CreditsLowDataSchema(DataSchema):
    balance_minutes = fields.Integer(
        required=True, metadata={"description": "The balance after the charge, in minutes."}
    )
    threshold = fields.Integer(
        required=True,
        metadata={"description": "The tenant's low-balance threshold it went below, minutes."},
    )


class FunctionCalledDataSchema(DataSchema):
    call_id = fields.String(required=True, metadata={"description": "call_…"})
    function_name = fields.String(
        required=True, metadata={"description": "The function the AI called."}
    )
    parameters = fields.Dict(
        required=True, metadata={"description": "The values the AI called it with."}
    )
    result = fields.Dict(
        required=True,
        metadata={
            "description": 'The object the endpoint answered; or {"error": {"code", '
            '"message"}} when the call failed (function_timeout, function_http_error, …).'
        },
    )


class WebhookTestDataSchema(DataSchema):
    webhook_id = fields.String(required=True, metadata={"description": "wh_…: the webhook tested."})
    message = fields.String(required=True, metadata={"description": "A fixed sentence."})


class CampaignCountsSchema(DataSchema):
    total = fields.Integer(required=True, metadata={"description": "Contacts in the campaign."})
    pending = fields.Integer(required=True, metadata={"description": "Contacts not yet called."})
    in_progress = fields.Integer(
        required=True, metadata={"description": "Contacts whose call is queued or under way."}
    )
    completed = fields.Integer(
        required=True, metadata={"description": "Contacts whose call was answered and ended."}
    )
    failed = fields.Integer(required=True, metadata={"description": "Contacts out of attempts."})


class CampaignCompletedDataSchema(DataSchema):
    campaign_id = fields.String(required=True, metadata={"description": "cmp_…"})
    name = fields.String(required=True, metadata={"description": "The campaign's name."})
    counts = fields.Nested(
        CampaignCountsSchema,
        required=True,
        metadata={"description": "How its contacts ended up."},
    )
    completed_at = fields.String(
        required=True,
        metadata={
            "description": "When its last contact was done: ISO 8601 UTC with milliseconds.",
            "format": "date-time",
        },
    )


class CallAnalysisSchema(DataSchema):
    """A call's post-call analysis (DESIGN.md section 17)."""

    status = fields.String(
        required=True,
        metadata={
            "description": "pending (the job has not run yet), done, failed (reason says "
            "why), or not_configured (the service has no Gemini key: nothing was asked).",
            "enum": ANALYSIS_STATUSES,
        },
    )
    summary = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "A short summary of the call; null unless done and asked for."},
    )
    successful = fields.Boolean(
        required=True,
        allow_none=True,
        metadata={
            "description": "Whether the call reached its goal (the plan's successCriteria); "
            "null unless done."
        },
    )
    success_reason = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "Why it is judged so, in a sentence; null unless done."},
    )
    fields_ = fields.Dict(
        data_key="fields",
        required=True,
        metadata={
            "description": "The plan's fields by name: text, a number, true or false, or one "
            "of an enum's choices; null for an optional field the call did not say; {} unless "
            "done."
        },
    )
    plan_version = fields.Integer(
        required=True,
        allow_none=True,
        metadata={
            "description": "The agent's version whose analysisPlan was used: the one that "
            "answered the call, or its latest when POST /calls/:id/analyze ran it again."
        },
    )
    model = fields.String(
        required=True, allow_none=True, metadata={"description": "The model that analysed it."}
    )
    analyzed_at = fields.String(
        required=True,
        allow_none=True,
        metadata={
            "description": "When the analysis ended (done or failed): ISO 8601 UTC with "
            "milliseconds.",
            "format": "date-time",
        },
    )
    cost_idr = fields.Integer(
        required=True,
        metadata={
            "description": "What the analysis requests cost, " + INTEGER_IDR + " Never billed "
            "to you: usage shows it as analysisCostIdr."
        },
    )
    reason = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "Why it failed (null unless failed)."},
    )


class CallAnalyzedDataSchema(CallAnalysisSchema):
    call_id = fields.String(required=True, metadata={"description": "call_…"})
    agent_id = fields.String(
        required=True, allow_none=True, metadata={"description": "agent_…: the call's agent."}
    )
    agent_version = fields.Integer(
        required=True,
        allow_none=True,
        metadata={"description": "The version of the agent that answered the call."},
    )


# Every event by name: what it means, and the schema of its data.
EVENT_DATA: dict[str, tuple[str, type[Schema]]] = {
    "call.started": ("An inbound call was received.", CallStartedDataSchema),
    "call.answered": ("The AI agent answered the call.", CallAnsweredDataSchema),
    "call.ended": ("The call ended (it was charged in the same step).", CallEndedDataSchema),
    "call.transcript": ("The call's transcript summary is available.", CallTranscriptDataSchema),
    "credits.low": ("A charge took the balance below the threshold.", CreditsLowDataSchema),
    "function.called": ("The AI called one of the agent's functions.", FunctionCalledDataSchema),
    "webhook.test": ("A test for one webhook (POST /webhooks/:id/test).", WebhookTestDataSchema),
    "campaign.completed": ("Every contact of a campaign is done.", CampaignCompletedDataSchema),
    "call.analyzed": (
        "A call's post-call analysis is done or failed.",
        CallAnalyzedDataSchema,
    ),
}


def _title(event: str) -> str:
    """call.ended → CallEnded: the stem of the event's schema names."""
    return "".join(part.capitalize() for part in event.split("."))


def _envelope(event: str, meaning: str, data: type[Schema]) -> type[ma.Schema]:
    """The schema of the event as delivered: id, event (this name only), timestamp, data."""
    return Schema.from_dict(
        {
            "id": fields.String(
                required=True,
                metadata={"description": "evt_…; the X-Service-Event-Id and webhook-id headers."},
            ),
            "event": fields.String(
                required=True, metadata={"description": meaning, "enum": [event]}
            ),
            "timestamp": fields.String(
                required=True,
                metadata={
                    "description": "When it happened: ISO 8601 UTC with milliseconds.",
                    "format": "date-time",
                },
            ),
            "data": fields.Nested(data, required=True, metadata={"description": "Its fields."}),
        },
        name=f"{_title(event)}EventSchema",
    )


def _detail(envelope: type[ma.Schema]) -> type[ma.Schema]:
    """The event with its deliveries, as GET /events/:id answers it."""
    deliveries = fields.List(
        fields.Nested(DeliverySchema),
        required=True,
        metadata={"description": "Its deliveries to your webhooks (replays too), oldest first."},
    )
    name = envelope.__name__.removesuffix("Schema") + "DetailSchema"
    return envelope.from_dict({"deliveries": deliveries}, name=name)


ENVELOPES = {name: _envelope(name, *described) for name, described in EVENT_DATA.items()}
DETAILS = {name: _detail(envelope) for name, envelope in ENVELOPES.items()}


class EventUnion(OneOfSchema):
    """An event: the schema of its name (type_schemas), which names it in `event`."""

    type_field = "event"
    type_field_remove = False

    def get_obj_type(self, obj: dict[str, Any]) -> str:
        return obj["event"]


class EventSchema(EventUnion):
    """An event exactly as a webhook delivery's body carries it."""

    type_schemas = ENVELOPES


class WebhookEventSchema(EventUnion):
    """A webhook delivery's body, whichever the event: the one schema to parse a body with
    (the same union as Event, the event log's; each delivery's callback names its own event's
    schema)."""

    type_schemas = ENVELOPES


class EventDetailSchema(EventUnion):
    """An event with its deliveries."""

    type_schemas = DETAILS


# The deliveries, described as callbacks of POST /webhooks (OpenAPI 3.0 has no webhooks
# section): one per event, sent to the webhook's url.
DELIVERY_HEADERS = (
    ("X-Service-Signature", "sha256=<hex HMAC-SHA256 of the raw body, keyed by the secret>."),
    (
        "X-Service-Signature-Previous",
        "Only while a rotated secret overlaps (rotate-secret): the same, keyed by the previous "
        "secret.",
    ),
    (
        "webhook-signature",
        "Standard Webhooks: v1,<base64 HMAC-SHA256 of "
        '"{webhook-id}.{webhook-timestamp}.{body}">; while a rotated secret overlaps, two such '
        "entries separated by a space (the new secret's first).",
    ),
    ("webhook-id", "The event id (evt_…): the same on every attempt; dedupe on it."),
    ("webhook-timestamp", "Unix seconds of this attempt."),
    ("X-Service-Event-Id", "The event id (evt_…), as webhook-id."),
    ("X-Service-Delivery-Id", "dlv_…: this delivery (a replay is a new one)."),
    ("X-Service-Attempt", "1 for the first attempt, then 2, 3, … (at most 8)."),
)


def _callback(event: str, meaning: str) -> dict[str, Any]:
    return {
        "{$request.body#/url}": {
            "post": {
                "summary": f"{event}: {meaning}",
                "description": "Delivered to every active webhook subscribed to the event, "
                "signed with its secret; retried until a 2xx (8 attempts over about 28 hours).",
                "parameters": [
                    {
                        "name": name,
                        "in": "header",
                        "required": name != "X-Service-Signature-Previous",
                        "description": description,
                        "schema": {"type": "string"},
                    }
                    for name, description in DELIVERY_HEADERS
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": ENVELOPES[event]}},
                },
                "responses": {
                    "2XX": {"description": "Received: the delivery succeeded."},
                    "410": {"description": "Gone: the webhook is disabled at once."},
                    "default": {"description": "Any other answer, or none in 10 s: retried."},
                },
            }
        }
    }


CALLBACKS = {name: _callback(name, meaning) for name, (meaning, _) in EVENT_DATA.items()}
