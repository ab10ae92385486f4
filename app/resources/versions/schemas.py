"""Agent version schemas (DESIGN.md section 11): the history, one version whole, the stats."""

from typing import Any

from marshmallow import fields

from app.resources.agents.schemas import VOICES
from app.resources.analysis_plan import AnalysisPlanSchema
from app.resources.common import PageArgsSchema, PaginationSchema, Schema
from app.resources.fields import DateOrTimestamp, Timestamp
from app.resources.functions.schemas import FunctionDefinitionSchema
from app.services.audit import ACTOR_TYPES


class VersionActorSchema(Schema):
    type = fields.String(
        required=True,
        metadata={"description": "Who made it: api_key, user, cli or system.", "enum": ACTOR_TYPES},
    )
    id = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "The API key's or user's id; null for the CLI and the system."},
    )
    label = fields.String(
        required=True,
        metadata={"description": "The key's name and prefix, the user's email, CLI or System."},
    )


class VersionSummarySchema(Schema):
    version = fields.Integer(required=True, metadata={"description": "1, 2, 3, … per agent."})
    created_at = Timestamp(required=True)
    changes = fields.List(
        fields.String(),
        required=True,
        metadata={
            "description": "What differs from the version before: the agent's field names "
            "(systemPrompt, voiceId, …) and functions when its functions differ; [] for "
            "version 1."
        },
    )
    actor = fields.Nested(VersionActorSchema, required=True)


class VersionListSchema(Schema):
    versions = fields.List(fields.Nested(VersionSummarySchema), required=True)
    pagination = fields.Nested(PaginationSchema, required=True)


class VersionQueryArgsSchema(PageArgsSchema):
    """Query parameters of the version list: a page of it."""


class VersionAgentSchema(Schema):
    """An agent's call-facing fields as a version holds them."""

    name = fields.String(required=True, metadata={"description": "Display name."})
    system_prompt = fields.String(
        required=True, metadata={"description": "Instructions and persona for the AI."}
    )
    voice_id = fields.String(
        required=True,
        metadata={"description": "One of Puck, Charon, Kore, Fenrir, Aoede.", "enum": VOICES},
    )
    greeting_text = fields.String(
        required=True, metadata={"description": "What the agent says when it answers."}
    )
    language = fields.String(required=True, metadata={"description": "BCP 47 language tag."})
    max_call_duration_minutes = fields.Integer(
        required=True, metadata={"description": "Calls are cut off after this many minutes."}
    )
    tools_enabled = fields.List(
        fields.String(),
        required=True,
        metadata={"description": "Names of the tools enabled for the agent."},
    )
    escalation_number = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "Number for human escalation (E.164), or null."},
    )
    analysis_plan = fields.Nested(
        AnalysisPlanSchema,
        required=True,
        metadata={"description": "What the analysis of its calls extracts."},
    )


class VersionSchema(Schema):
    """One version whole: the agent's call-facing fields and its functions then."""

    version = fields.Integer(required=True, metadata={"description": "1, 2, 3, … per agent."})
    created_at = Timestamp(required=True)
    agent = fields.Nested(
        VersionAgentSchema,
        required=True,
        metadata={"description": "The agent's fields that calls use, as they were."},
    )
    functions = fields.List(
        fields.Nested(FunctionDefinitionSchema),
        required=True,
        metadata={"description": "The agent's functions as they were, by name."},
    )

    def get_attribute(self, obj: Any, attr: str, default: Any) -> Any:
        # obj is an AgentVersion: the agent's fields are its own.
        if attr == "agent":
            return obj
        return super().get_attribute(obj, attr, default)


class StatsQueryArgsSchema(Schema):
    from_ = DateOrTimestamp(
        metadata={
            "description": "Only calls with startedAt >= this (a date means 00:00Z); default: "
            "30 days ago."
        },
    )
    to = DateOrTimestamp(
        metadata={
            "description": "Only calls with startedAt < this (a date means 00:00Z); after "
            "from. Default: none (up to now)."
        }
    )


class VersionStatsSchema(Schema):
    version = fields.Integer(required=True, metadata={"description": "The agent's version."})
    calls = fields.Integer(
        required=True, metadata={"description": "Calls answered with it that started in range."}
    )
    answered = fields.Integer(required=True, metadata={"description": "Of them, answered."})
    answered_share = fields.Float(
        required=True, metadata={"description": "answered / calls, 0 to 1 (4 decimals)."}
    )
    avg_talk_time_seconds = fields.Float(
        required=True,
        allow_none=True,
        metadata={
            "description": "Average talk time of the answered calls that ended, in seconds "
            "(1 decimal); null when none has."
        },
    )
    billed_minutes = fields.Integer(required=True, metadata={"description": "Minutes charged."})
    function_calls = fields.Integer(
        required=True, metadata={"description": "Functions the AI invoked in those calls."}
    )
    function_error_rate = fields.Float(
        required=True,
        allow_none=True,
        metadata={
            "description": "Share of those function calls that failed, 0 to 1 (4 decimals); "
            "null when there were none."
        },
    )
    ai_cost_idr = fields.Integer(required=True, metadata={"description": "AI cost in IDR."})
    analyzed_calls = fields.Integer(
        required=True,
        metadata={"description": "Of those calls, the ones whose post-call analysis is done."},
    )
    successful_calls = fields.Integer(
        required=True,
        metadata={"description": "Of the analysed calls, the ones judged successful."},
    )
    success_rate = fields.Float(
        required=True,
        allow_none=True,
        metadata={
            "description": "successfulCalls / analyzedCalls, 0 to 1 (4 decimals); null when "
            "none was analysed."
        },
    )


class AgentStatsSchema(Schema):
    versions = fields.List(
        fields.Nested(VersionStatsSchema),
        required=True,
        metadata={"description": "Each version that had calls in the range, newest version first."},
    )
