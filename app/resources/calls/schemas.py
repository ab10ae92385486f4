"""Call schemas: SPEC.md section 2's fields in camelCase; the list's query parameters."""

from typing import Any

from marshmallow import ValidationError, fields, validate, validates_schema

from app.resources.agents.schemas import E164
from app.resources.common import PageArgsSchema, PaginationSchema, Schema
from app.resources.events.payloads import CallAnalysisSchema
from app.resources.fields import MAX_INT32, DateOrTimestamp, PhoneNumberQuery, Timestamp
from app.services.calls import analysis as call_analysis
from app.services.calls.constants import (
    COST_COMPONENTS,
    DIRECTIONS,
    MAX_METADATA_BYTES,
    MAX_VARIABLE_LENGTH,
    MAX_VARIABLES,
    STATUSES,
    TURN_ROLES,
    VARIABLE_NAME,
    metadata_bytes,
)

E164_ERROR = "Must be an international number such as +6281234567890."
STATUS_DESCRIPTION = (
    "queued (an outbound call waiting for a runtime), ringing, answered, ended, dropped, "
    "failed or canceled (a queued call withdrawn before it was dialled)."
)


def metadata_size(value: dict[str, Any]) -> None:
    if metadata_bytes(value) > MAX_METADATA_BYTES:
        raise ValidationError(f"At most {MAX_METADATA_BYTES:,} bytes as compact JSON.")


def at_most_variables(value: dict[str, Any]) -> None:
    if len(value) > MAX_VARIABLES:
        raise ValidationError(f"At most {MAX_VARIABLES} variables.")


def Variables(**kwargs: Any) -> fields.Dict:  # noqa: N802 - reads like a field class
    """A call's variables: names as placeholders are written, string values."""
    return fields.Dict(
        keys=fields.String(
            validate=validate.Regexp(
                f"^{VARIABLE_NAME}$",
                error="A variable name is a letter or _ then up to 63 letters, digits or _.",
            )
        ),
        values=fields.String(validate=validate.Length(max=MAX_VARIABLE_LENGTH)),
        validate=at_most_variables,
        metadata={
            "description": f"Values for the {{{{name}}}} placeholders of the agent's "
            f"systemPrompt and greetingText in this call: up to {MAX_VARIABLES} names "
            f"(^{VARIABLE_NAME}$) with string values of up to {MAX_VARIABLE_LENGTH:,} "
            "characters.",
            "maxProperties": MAX_VARIABLES,
        },
        **kwargs,
    )


def CalleeNumber(**kwargs: Any) -> fields.String:  # noqa: N802 - reads like a field class
    """The number an outbound call dials, E.164."""
    kwargs.setdefault("metadata", {"description": "The number to call, e.g. +6281234567890."})
    return fields.String(validate=validate.Regexp(E164, error=E164_ERROR), **kwargs)


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
        metadata={"description": STATUS_DESCRIPTION, "enum": STATUSES},
    )
    started_at = Timestamp(
        required=True,
        metadata={"description": "When it started ringing; for a queued call, when it was queued."},
    )
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
            "refused; no_answer, busy or voicemail for an unanswered outbound call; canceled; "
            "session_too_large when a queued call's agent grew past the session size."
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
    successful = fields.Boolean(
        required=True,
        allow_none=True,
        metadata={
            "description": "The verdict of its post-call analysis: whether the call reached "
            "its goal (the plan's successCriteria); null until an analysis is done, and for a "
            "call not analysed. GET /calls?successful= filters by it."
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
    campaign_id = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "cmp_… that placed it; null for a call of no campaign."},
    )
    analysis = fields.Nested(
        CallAnalysisSchema,
        required=True,
        allow_none=True,
        metadata={
            "description": "Its post-call analysis, with its agent version's analysisPlan; "
            "null for a call that is not analysed (not ended, or no transcript turns)."
        },
    )

    def get_attribute(self, obj: Any, attr: str, default: Any) -> Any:
        # A call ended with turns whose job has not run yet shows a pending analysis.
        if attr == "analysis":
            return call_analysis.shown(obj)
        return super().get_attribute(obj, attr, default)


class CallCreateSchema(Schema):
    """Body of POST /calls: an outbound call to queue."""

    phone_number_id = fields.String(
        required=True,
        validate=validate.Length(1, 32),
        metadata={"description": "pn_…: the tenant's number the call is placed from."},
    )
    to = CalleeNumber(required=True)
    agent_id = fields.String(
        validate=validate.Length(1, 32),
        metadata={"description": "agent_… that talks in the call; default: the number's agent."},
    )
    variables = Variables(load_default=dict)
    metadata = fields.Dict(
        load_default=dict,
        validate=metadata_size,
        metadata={
            "description": f"Free-form object kept on the call; at most {MAX_METADATA_BYTES:,} "
            "bytes as compact JSON."
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
        metadata={
            "description": "Only calls in this status: " + STATUS_DESCRIPTION,
            "enum": STATUSES,
        },
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
    successful = fields.Boolean(
        metadata={
            "description": "Only calls whose analysis judged them successful (true) or not "
            "(false); calls not analysed are in neither."
        }
    )

    @validates_schema
    def version_of_an_agent(self, data: dict[str, Any], **kwargs: Any) -> None:
        if "agent_version" in data and "agent_id" not in data:
            raise ValidationError("A version is an agent's: send agentId with it.", "agentVersion")


class CallAnalyzeSchema(Schema):
    """The answer of POST /calls/:id/analyze: the analysis, pending until its job is done."""

    call_id = fields.String(required=True, metadata={"description": "call_…"})
    analysis = fields.Nested(CallAnalysisSchema, required=True)
