"""Runtime API schemas: what the voice runtime reports and the session it gets back."""

from typing import Any

from marshmallow import fields, validate

from app.resources.agents.schemas import E164
from app.resources.calls.schemas import CallDetailSchema
from app.resources.common import Schema
from app.resources.fields import MAX_INT32, StrictInteger, UtcDateTime
from app.services.calls import DIRECTIONS, END_STATUSES

E164_ERROR = "Must be an international number such as +6221555010."
MAX_CALL_SECONDS = 86_400  # a day: far above any call's length, inside every integer column


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


class FunctionSpecSchema(Schema):
    name = fields.String(required=True, metadata={"description": "Function name."})
    description = fields.String(
        required=True, metadata={"description": "What the function does, for the AI."}
    )
    parameters = fields.Dict(
        required=True, metadata={"description": "JSON Schema of its parameters."}
    )


class SessionSchema(Schema):
    agent_id = fields.String(required=True, metadata={"description": "The agent."})
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


class StartedCallSchema(CallDetailSchema):
    """The recorded call and, under session, what the runtime needs to run it."""

    session = fields.Nested(SessionSchema, required=True)

    def get_attribute(self, obj: Any, attr: str, default: Any) -> Any:
        # obj is a StartedCall: the call's fields come from obj.call.
        if attr == "session":
            return obj.session
        return super().get_attribute(obj.call, attr, default)


class CallAnsweredSchema(Schema):
    answered_at = UtcDateTime(
        metadata={"description": "When the agent answered (default: now)."},
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
        metadata={"description": "Seconds from start to end (at most 86,400)."},
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
        metadata={"description": "e.g. normal."},
    )
    hangup_initiator = fields.String(
        required=True,
        validate=validate.Length(1, 32),
        metadata={"description": "e.g. caller, agent or system."},
    )
    ai_cost_idr = StrictInteger(
        required=True,
        validate=validate.Range(0, MAX_INT32),
        metadata={"description": f"AI cost of the call in IDR (at most {MAX_INT32:,})."},
    )
    ended_at = UtcDateTime(
        metadata={"description": "When it ended (default: now)."},
    )
    metadata = fields.Dict(metadata={"description": "Merged into the call's metadata."})


class TranscriptSchema(Schema):
    transcript_summary = fields.String(
        required=True,
        validate=validate.Length(max=100_000),
        metadata={"description": "Summary of the conversation."},
    )


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


class FunctionErrorSchema(Schema):
    code = fields.String(
        required=True,
        metadata={
            "description": "unknown_function, invalid_parameters, function_timeout, "
            "function_http_error, function_invalid_response or function_unreachable."
        },
    )
    message = fields.String(required=True, metadata={"description": "What went wrong."})


class FunctionOutcomeSchema(Schema):
    result = fields.Dict(
        metadata={"description": "The endpoint's JSON object, on success (no error key then)."}
    )
    error = fields.Nested(
        FunctionErrorSchema,
        metadata={"description": "Why there is no result (no result key then)."},
    )
