"""Call schemas: SPEC.md section 2's fields in camelCase; the list's query parameters."""

from typing import Any

from marshmallow import ValidationError, fields, validate, validates_schema

from app.resources.common import PageArgsSchema, PaginationSchema, Schema
from app.resources.fields import MAX_INT32, DateOrTimestamp, PhoneNumberQuery, Timestamp
from app.services.calls import COST_COMPONENTS, DIRECTIONS, STATUSES, TURN_ROLES


class CallSchema(Schema):
    id = fields.String(required=True, metadata={"description": "call_…"})
    phone_number_id = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "pn_… it came in on."},
    )
    agent_id = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "agent_… that took it (null when no agent was assigned)."},
    )
    caller_number = fields.String(required=True, metadata={"description": "International format."})
    callee_number = fields.String(required=True, metadata={"description": "International format."})
    direction = fields.String(
        required=True, metadata={"description": "inbound or outbound.", "enum": DIRECTIONS}
    )
    status = fields.String(
        required=True,
        metadata={"description": "ringing, answered, ended, dropped or failed.", "enum": STATUSES},
    )
    started_at = Timestamp(required=True)
    ended_at = Timestamp(required=True, allow_none=True)
    duration_seconds = fields.Integer(
        required=True,
        allow_none=True,
        metadata={"description": "Null until it ends."},
    )
    talk_time_seconds = fields.Integer(
        required=True,
        allow_none=True,
        metadata={"description": "Seconds of conversation; null until it ends."},
    )
    hangup_reason = fields.String(
        required=True,
        allow_none=True,
        metadata={
            "description": "e.g. normal; no_agent, concurrency_limit or no_credits when it was "
            "refused."
        },
    )
    transcript_summary = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "Summary of the conversation, once the runtime sent it."},
    )
    ai_cost_idr = fields.Integer(
        required=True,
        allow_none=True,
        metadata={"description": "AI cost of the call in IDR; null until it ends."},
    )
    metadata = fields.Dict(
        required=True, metadata={"description": "Free-form object from the runtime."}
    )
    agent_version = fields.Integer(
        required=True,
        allow_none=True,
        metadata={
            "description": "The version of the agent it was answered with (GET "
            "/agents/:id/versions/:n); null when no agent took it, and for calls from before "
            "versions."
        },
    )


class CostBreakdownRecordSchema(Schema):
    """A call's AI cost by component, in IDR, as the runtime reported it."""

    llm = fields.Integer(required=True, metadata={"description": "Language model."})
    stt = fields.Integer(required=True, metadata={"description": "Speech to text."})
    tts = fields.Integer(required=True, metadata={"description": "Text to speech."})
    telephony = fields.Integer(required=True, metadata={"description": "The phone line."})
    other = fields.Integer(required=True, metadata={"description": "Anything else."})


class CallDetailSchema(CallSchema):
    answered_at = Timestamp(required=True, allow_none=True)
    hangup_initiator = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "Who hung up, e.g. caller, agent or system."},
    )
    billed_minutes = fields.Integer(
        required=True,
        allow_none=True,
        metadata={
            "description": "Minutes charged: ceil(talkTimeSeconds / 60); null until it ends."
        },
    )
    function_calls = fields.Integer(
        attribute="function_calls_count",
        required=True,
        metadata={"description": "How many functions the AI invoked during the call."},
    )
    variables = fields.Dict(
        keys=fields.String(),
        values=fields.String(),
        required=True,
        metadata={
            "description": "The values the call filled the agent's {{name}} placeholders "
            "with; {} when none."
        },
    )
    recording_url = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "The recording's https URL, once the runtime reported it."},
    )
    cost_breakdown = fields.Nested(
        CostBreakdownRecordSchema,
        required=True,
        allow_none=True,
        metadata={
            "description": f"aiCostIdr by component ({', '.join(COST_COMPONENTS)}); null when "
            "the runtime reported none."
        },
    )


class TurnRecordSchema(Schema):
    seq = fields.Integer(
        required=True, metadata={"description": "The turn's place in the call: 1, 2, 3, …"}
    )
    role = fields.String(
        required=True,
        metadata={"description": "agent or caller: who spoke.", "enum": TURN_ROLES},
    )
    text = fields.String(required=True, metadata={"description": "What was said."})
    start_ms = fields.Integer(
        required=True,
        allow_none=True,
        metadata={"description": "When it began, in ms from the call's start; null if unknown."},
    )
    end_ms = fields.Integer(
        required=True,
        allow_none=True,
        metadata={"description": "When it ended, in ms from the call's start; null if unknown."},
    )


class CallTranscriptSchema(Schema):
    call_id = fields.String(required=True, metadata={"description": "call_…"})
    transcript_summary = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "Summary of the conversation, once the runtime sent it."},
    )
    turns = fields.List(
        fields.Nested(TurnRecordSchema),
        required=True,
        metadata={"description": "The conversation in order (seq); [] until the runtime sent any."},
    )


class CallListSchema(Schema):
    calls = fields.List(fields.Nested(CallSchema), required=True)
    pagination = fields.Nested(PaginationSchema, required=True)


class CallQueryArgsSchema(PageArgsSchema):
    status = fields.String(
        validate=validate.OneOf(STATUSES),
        metadata={"description": "Only calls in this status.", "enum": STATUSES},
    )
    from_ = DateOrTimestamp(
        metadata={"description": "Only calls with startedAt >= this (a date means 00:00Z)."},
    )
    to = DateOrTimestamp(
        metadata={"description": "Only calls with startedAt < this (a date means 00:00Z)."}
    )
    agent_id = fields.String(metadata={"description": "Only this agent's."})
    agent_version = fields.Integer(
        validate=validate.Range(1, MAX_INT32),
        metadata={
            "description": "Only calls answered with this version of the agent: needs agentId."
        },
    )
    phone_number_id = fields.String(metadata={"description": "Only calls on this number."})
    caller_number = PhoneNumberQuery(
        metadata={
            "description": "Only calls from this number (international format; a leading + "
            "may be left out), or, ending in *, from numbers that start with it: +62812*."
        }
    )
    direction = fields.String(
        validate=validate.OneOf(DIRECTIONS),
        metadata={"description": "inbound or outbound.", "enum": DIRECTIONS},
    )

    @validates_schema
    def version_of_an_agent(self, data: dict[str, Any], **kwargs: Any) -> None:
        if "agent_version" in data and "agent_id" not in data:
            raise ValidationError("A version is an agent's: send agentId with it.", "agentVersion")
