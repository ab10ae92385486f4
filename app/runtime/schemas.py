"""Runtime API schemas: what the voice runtime reports and the session it gets back."""

from typing import Any

from marshmallow import ValidationError, fields, validate, validates_schema

from app.resources.agents.schemas import E164
from app.resources.calls.schemas import CallDetailSchema, Variables, metadata_size
from app.resources.common import Schema
from app.resources.fields import MAX_INT32, StrictInteger, Text, UtcDateTime
from app.resources.functions.schemas import FunctionErrorSchema
from app.services.calls.constants import (
    COST_COMPONENTS,
    DIRECTIONS,
    DURATION_ALLOWANCE_SECONDS,
    END_STATUSES,
    MAX_DISPATCH,
    MAX_METADATA_BYTES,
    MAX_TURN_BYTES,
    MAX_TURNS,
    MAX_WHATSAPP_EVENT_BYTES,
    MAX_WHATSAPP_VALUES,
    TURN_ROLES,
    WHATSAPP_HANGUP_REASONS,
    metadata_bytes,
)
from app.services.phone_numbers import CHANNELS

E164_ERROR = "Must be an international number such as +6221555010."
MAX_CALL_SECONDS = 86_400  # a day: far above any call's length, inside every integer column
MAX_CALL_MS = MAX_CALL_SECONDS * 1000
# A recording's address: https, a host name or address (no user info), an optional port,
# then printable ASCII. The whole rule: the dashboard shows it as a link.
RECORDING_URL = r"^https://[A-Za-z0-9.-]+(:[0-9]{1,5})?([/?#][!-~]*)?$"


class CallStartSchema(Schema):
    did = fields.String(
        required=True,
        validate=validate.Regexp(E164, error=E164_ERROR),
        metadata={"description": "The business number that was called (a provisioned number)."},
    )
    caller_number = fields.String(
        required=True,
        validate=validate.Regexp(E164, error=E164_ERROR),
        metadata={"description": "The other party's number (the callee of an outbound call)."},
    )
    direction = fields.String(
        load_default="inbound",
        validate=validate.OneOf(DIRECTIONS),
        metadata={"description": "inbound (default) or outbound.", "enum": DIRECTIONS},
    )
    provider_call_id = fields.String(
        load_default=None,
        allow_none=True,
        validate=validate.Length(1, 128),
        metadata={"description": "The telephony provider's id: a repeat returns the same call."},
    )
    variables = Variables(load_default=dict)


class FunctionSpecSchema(Schema):
    name = fields.String(required=True, metadata={"description": "Function name."})
    description = fields.String(
        required=True, metadata={"description": "What the function does, for the AI."}
    )
    parameters = fields.Dict(
        required=True, metadata={"description": "JSON Schema of its parameters."}
    )
    timeout_ms = fields.Integer(
        required=True,
        metadata={
            "description": "The function's budget in milliseconds: the service answers the "
            "function call within it plus 0.5 s, so a runtime waits that long and no longer."
        },
    )


class SessionSchema(Schema):
    agent_id = fields.String(required=True, metadata={"description": "The agent."})
    agent_version = fields.Integer(
        required=True,
        allow_none=True,
        metadata={
            "description": "The version of the agent the call is answered with: the number's "
            "pinned one, else the agent's latest. Null only for a call from before versions."
        },
    )
    system_prompt = fields.String(
        required=True, metadata={"description": "Instructions for the AI."}
    )
    voice_id = fields.String(required=True, metadata={"description": "Voice to speak with."})
    greeting_text = fields.String(
        required=True,
        metadata={"description": "What to say on answering."},
    )
    language = fields.String(required=True, metadata={"description": "BCP 47 language tag."})
    escalation_number = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "Where to transfer to a human, or null."},
    )
    tools_enabled = fields.List(fields.String(), required=True)
    functions = fields.List(fields.Nested(FunctionSpecSchema), required=True)
    max_call_duration_seconds = fields.Integer(
        required=True,
        metadata={"description": "Hang up after this: min(agent limit, balance) in seconds."},
    )
    missing_variables = fields.List(
        fields.String(),
        required=True,
        metadata={
            "description": "Placeholders ({{name}}) of systemPrompt and greetingText that the "
            "call's variables had no value for: left as written. Empty when none."
        },
    )


class StartedCallSchema(CallDetailSchema):
    """The recorded call and, under session, what the runtime needs to run it."""

    session = fields.Nested(SessionSchema, required=True)

    def get_attribute(self, obj: Any, attr: str, default: Any) -> Any:
        # obj is a StartedCall: the call's fields come from obj.call.
        if attr == "session":
            return obj.session
        return super().get_attribute(obj.call, attr, default)


class DispatchSchema(Schema):
    max = StrictInteger(
        load_default=1,
        validate=validate.Range(1, MAX_DISPATCH),
        metadata={
            "description": f"Claim at most this many calls (1 to {MAX_DISPATCH}; default 1)."
        },
    )
    channel = fields.String(
        load_default=None,
        validate=validate.OneOf(CHANNELS),
        metadata={
            "description": "Claim only calls placed from a number of this channel: phone (a "
            "telephony provider) or whatsapp (WhatsApp Business); absent: calls of every "
            "channel. A runtime that places calls of one channel names it, so that the "
            "others stay queued for a runtime that can place them."
        },
    )


class DispatchedCallSchema(Schema):
    """A claimed call and its session."""

    call = fields.Nested(CallDetailSchema, required=True, metadata={"description": "Now ringing."})
    session = fields.Nested(SessionSchema, required=True)
    channel = fields.String(
        required=True,
        metadata={
            "description": "The channel of the number the call is placed from: phone (a "
            "telephony provider) or whatsapp (WhatsApp Business).",
            "enum": list(CHANNELS),
        },
    )
    whatsapp_phone_number_id = fields.String(
        required=True,
        allow_none=True,
        metadata={
            "description": "Meta's id of the WhatsApp number the call is placed from (Graph's "
            "POST /{id}/calls); null for a phone number."
        },
    )


class DispatchedCallsSchema(Schema):
    calls = fields.List(
        fields.Nested(DispatchedCallSchema),
        required=True,
        metadata={
            "description": "The calls claimed, oldest first, each now ringing, with its session; "
            "[] when none is waiting (or every waiting call's tenant is at its limit)."
        },
    )


class CallAnsweredSchema(Schema):
    answered_at = UtcDateTime(
        metadata={"description": "When the agent answered (default: now)."},
    )


class CostBreakdownSchema(Schema):
    """The AI cost of a call by component, in IDR; a component left out is 0."""

    llm = StrictInteger(
        validate=validate.Range(0, MAX_INT32), metadata={"description": "Language model."}
    )
    stt = StrictInteger(
        validate=validate.Range(0, MAX_INT32), metadata={"description": "Speech to text."}
    )
    tts = StrictInteger(
        validate=validate.Range(0, MAX_INT32), metadata={"description": "Text to speech."}
    )
    telephony = StrictInteger(
        validate=validate.Range(0, MAX_INT32), metadata={"description": "The phone line."}
    )
    other = StrictInteger(
        validate=validate.Range(0, MAX_INT32), metadata={"description": "Anything else."}
    )


class CallEndSchema(Schema):
    status = fields.String(
        required=True,
        validate=validate.OneOf(END_STATUSES),
        metadata={"description": "ended, dropped or failed.", "enum": END_STATUSES},
    )
    duration_seconds = StrictInteger(
        required=True,
        validate=validate.Range(0, MAX_CALL_SECONDS),
        metadata={
            "description": "Seconds from start to end (at most 86,400), and at most the time "
            f"since the call started plus {DURATION_ALLOWANCE_SECONDS} s (else 422)."
        },
    )
    talk_time_seconds = StrictInteger(
        required=True,
        validate=validate.Range(0, MAX_CALL_SECONDS),
        metadata={
            "description": "Seconds of conversation (at most 86,400); "
            "ceil(talkTimeSeconds / 60) is charged."
        },
    )
    hangup_reason = fields.String(
        required=True,
        validate=validate.Length(1, 64),
        metadata={
            "description": "e.g. normal; no_answer, busy or voicemail for an unanswered "
            f"outbound call; on WhatsApp also {' and '.join(WHATSAPP_HANGUP_REASONS)} (the "
            "user rejected the call; Meta refused it for want of the user's permission)."
        },
    )
    hangup_initiator = fields.String(
        required=True,
        validate=validate.Length(1, 32),
        metadata={"description": "e.g. caller, agent or system."},
    )
    ai_cost_idr = StrictInteger(
        validate=validate.Range(0, MAX_INT32),
        metadata={
            "description": f"AI cost of the call in IDR (at most {MAX_INT32:,}). Required "
            "without costBreakdown; with it, it must equal the breakdown's sum, and left out "
            "it is that sum."
        },
    )
    cost_breakdown = fields.Nested(
        CostBreakdownSchema,
        metadata={
            "description": f"The AI cost by component ({', '.join(COST_COMPONENTS)}), in IDR; "
            f"a component left out is 0. The sum is at most {MAX_INT32:,}."
        },
    )
    recording_url = fields.String(
        validate=[validate.Length(max=2048), validate.Regexp(RECORDING_URL)],
        metadata={
            "description": "Where the runtime keeps the call's recording: an https URL of at "
            "most 2,048 characters. The service keeps the link, not the audio.",
            "pattern": RECORDING_URL,
        },
    )
    ended_at = UtcDateTime(
        metadata={"description": "When it ended (default: now)."},
    )
    metadata = fields.Dict(
        validate=metadata_size,
        metadata={
            "description": "Merged into the call's metadata; at most 16 KiB "
            f"({MAX_METADATA_BYTES:,} bytes) as compact JSON, merged included."
        },
    )

    @validates_schema(skip_on_field_errors=False)
    def reports_the_cost(self, data: dict[str, Any], **kwargs: Any) -> None:
        # Beside the other fields' errors: a report missing everything names every field.
        if "ai_cost_idr" not in data and "cost_breakdown" not in data:
            raise ValidationError("Send aiCostIdr, costBreakdown or both.", "aiCostIdr")

    @validates_schema
    def talks_no_longer_than_it_lasts(self, data: dict[str, Any], **kwargs: Any) -> None:
        if data["talk_time_seconds"] > data["duration_seconds"]:
            raise ValidationError("Must not be more than durationSeconds.", "talkTimeSeconds")


class TurnSchema(Schema):
    """One turn of the conversation, as the runtime heard it."""

    role = fields.String(
        required=True,
        validate=validate.OneOf(TURN_ROLES),
        metadata={"description": "agent or caller: who spoke.", "enum": TURN_ROLES},
    )
    text = Text(
        required=True,
        validate=validate.Length(1, MAX_TURN_BYTES),
        metadata={
            "description": "What was said: lines and tabs, but no other control character and "
            "no bidirectional override (U+202A-U+202E, U+2066-U+2069)."
        },
    )
    start_ms = StrictInteger(
        allow_none=True,
        validate=validate.Range(0, MAX_CALL_MS),
        metadata={"description": "When the turn began, in ms from the call's start."},
    )
    end_ms = StrictInteger(
        allow_none=True,
        validate=validate.Range(0, MAX_CALL_MS),
        metadata={"description": "When it ended, in ms from the call's start; not before startMs."},
    )

    @validates_schema
    def ends_after_it_starts(self, data: dict[str, Any], **kwargs: Any) -> None:
        start, end = data.get("start_ms"), data.get("end_ms")
        if start is not None and end is not None and end < start:
            raise ValidationError("Must not be before startMs.", "endMs")


class TranscriptSchema(Schema):
    transcript_summary = Text(
        validate=validate.Length(max=100_000),
        metadata={
            "description": "Summary of the conversation; emits call.transcript when new. Lines "
            "and tabs, but no other control character and no bidirectional override."
        },
    )
    turns = fields.List(
        fields.Nested(TurnSchema),
        validate=validate.Length(1, MAX_TURNS),
        metadata={
            "description": f"Turns to append to the call's transcript, in order. A call holds "
            f"at most {MAX_TURNS:,} turns and {MAX_TURN_BYTES:,} bytes (UTF-8) of their text: "
            "a post that would take it past that is 422 and stores nothing."
        },
    )

    @validates_schema
    def says_something(self, data: dict[str, Any], **kwargs: Any) -> None:
        if "transcript_summary" not in data and "turns" not in data:
            raise ValidationError("Send transcriptSummary, turns or both.", "transcriptSummary")


class FunctionCallSchema(Schema):
    function_name = fields.String(
        required=True,
        validate=validate.Length(1, 64),
        metadata={"description": "The name of one of the agent's functions."},
    )
    parameters = fields.Dict(
        load_default=dict,
        metadata={"description": "Values for the function's declared parameters."},
    )


class FunctionOutcomeSchema(Schema):
    result = fields.Dict(
        metadata={"description": "The endpoint's JSON object, on success (no error key then)."}
    )
    error = fields.Nested(
        FunctionErrorSchema,
        metadata={"description": "Why there is no result (no result key then)."},
    )


class WhatsAppNumberSchema(Schema):
    """A WhatsApp number as the runtime serves it: with its account's secrets in clear."""

    phone_number_id = fields.String(
        required=True, metadata={"description": "The service's id of the number (pn_…)."}
    )
    whatsapp_phone_number_id = fields.String(
        required=True,
        metadata={"description": "Meta's id of the number, as asked for: Graph's /{id}/calls."},
    )
    display_number = fields.String(
        required=True,
        metadata={"description": "The number (E.164): the did of the calls it starts."},
    )
    access_token = fields.String(
        required=True,
        metadata={"description": "The account's access token, for Graph's calling requests."},
    )
    app_secret = fields.String(
        required=True,
        metadata={
            "description": "The Meta app's secret, to check X-Hub-Signature-256 on webhooks."
        },
    )
    graph_url = fields.String(
        required=True,
        metadata={"description": "Meta's Graph API base URL (WHATSAPP_GRAPH_URL) to call."},
    )


def whatsapp_values_size(values: list[Any]) -> None:
    if metadata_bytes({"values": values}) > MAX_WHATSAPP_EVENT_BYTES:
        raise ValidationError(f"At most {MAX_WHATSAPP_EVENT_BYTES:,} bytes as compact JSON.")


class WhatsAppEventsSchema(Schema):
    values = fields.List(
        fields.Dict(),
        required=True,
        validate=[validate.Length(1, MAX_WHATSAPP_VALUES), whatsapp_values_size],
        metadata={
            "description": "The `value` objects of Meta's messages webhook changes, as Meta "
            f"sent them: 1 to {MAX_WHATSAPP_VALUES}, at most "
            f"{MAX_WHATSAPP_EVENT_BYTES:,} bytes as compact JSON."
        },
    )


class WhatsAppEventsAcceptedSchema(Schema):
    accepted = fields.Integer(
        required=True,
        metadata={"description": "Call permission replies applied; anything else is ignored."},
    )
