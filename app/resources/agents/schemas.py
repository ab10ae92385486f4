"""Agent schemas: SPEC.md's fields in camelCase, DESIGN.md section 3's rules.

Requests and responses have schemas of their own: a create body needs name and systemPrompt,
an update body needs nothing and has no defaults (a client sends a body schema's defaults,
which would overwrite the fields a PATCH leaves out), and a response carries every field.
"""

from marshmallow import fields, validate

from app.resources.analysis_plan import AnalysisPlanField, AnalysisPlanSchema
from app.resources.common import Schema
from app.resources.fields import StrictBoolean, StrictInteger, Timestamp, unique_items

VOICES = ("Puck", "Charon", "Kore", "Fenrir", "Aoede")
LANGUAGE = r"^[a-z]{2,3}(-[A-Z]{2})?$"
E164 = r"^\+[1-9]\d{6,14}$"
TOOL_NAME = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"


class AgentCreateSchema(Schema):
    """Body of POST /agents: name and systemPrompt; a field left out takes the agent's default
    (app.models.Agent), given in its description."""

    name = fields.String(
        required=True, validate=validate.Length(1, 100), metadata={"description": "Display name."}
    )
    system_prompt = fields.String(
        required=True,
        validate=validate.Length(1, 20_000),
        metadata={"description": "Instructions and persona for the AI (1–20,000 characters)."},
    )
    voice_id = fields.String(
        validate=validate.OneOf(VOICES),
        metadata={
            "description": "One of Puck, Charon, Kore, Fenrir, Aoede (Puck for a new agent).",
            "enum": VOICES,
        },
    )
    greeting_text = fields.String(
        validate=validate.Length(max=2_000),
        metadata={"description": "What the agent says when it answers (empty for a new agent)."},
    )
    language = fields.String(
        validate=validate.Regexp(LANGUAGE, error="Must be a language tag such as id or en-US."),
        metadata={"description": "BCP 47 language tag (id, Bahasa Indonesia, for a new agent)."},
    )
    max_call_duration_minutes = StrictInteger(
        validate=validate.Range(1, 120),
        metadata={
            "description": "Calls are cut off after this many minutes (1–120; 10 for a new agent)."
        },
    )
    tools_enabled = fields.List(
        fields.String(validate=validate.Regexp(TOOL_NAME, error="Not a valid tool name.")),
        validate=[validate.Length(max=64), unique_items],
        metadata={
            "description": "Names of the tools enabled for the agent (none for a new agent).",
            "uniqueItems": True,
        },
    )
    is_active = StrictBoolean(
        metadata={"description": "An inactive agent does not answer calls (true for a new agent)."},
    )
    escalation_number = fields.String(
        allow_none=True,
        validate=validate.Regexp(
            E164, error="Must be an international number such as +6281234567."
        ),
        metadata={"description": "Number for human escalation (E.164), or null (the default)."},
    )
    analysis_plan = AnalysisPlanField(
        metadata={
            "description": "What the analysis of each ended call extracts (DESIGN.md section "
            '17); default {"summary": true, "fields": []}, a summary only.'
        },
    )


class AgentUpdateSchema(AgentCreateSchema):
    """Body of PATCH /agents/:id, loaded with partial=True: any subset of the writable fields;
    a field left out keeps its value."""


class AgentSchema(Schema):
    """An agent in a response: every field, always."""

    id = fields.String(required=True, metadata={"description": "agent_…", "example": "agent_x"})
    name = fields.String(required=True, metadata={"description": "Display name."})
    system_prompt = fields.String(
        required=True,
        metadata={"description": "Instructions and persona for the AI."},
    )
    voice_id = fields.String(
        required=True,
        metadata={"description": "One of Puck, Charon, Kore, Fenrir, Aoede.", "enum": VOICES},
    )
    greeting_text = fields.String(
        required=True,
        metadata={"description": "What the agent says when it answers."},
    )
    language = fields.String(required=True, metadata={"description": "BCP 47 language tag."})
    max_call_duration_minutes = fields.Integer(
        required=True,
        metadata={"description": "Calls are cut off after this many minutes."},
    )
    tools_enabled = fields.List(
        fields.String(),
        required=True,
        metadata={"description": "Names of the tools enabled for the agent."},
    )
    is_active = fields.Boolean(
        required=True,
        metadata={"description": "An inactive agent does not answer calls."},
    )
    escalation_number = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "Number for human escalation (E.164), or null."},
    )
    analysis_plan = fields.Nested(
        AnalysisPlanSchema,
        required=True,
        metadata={"description": "What the analysis of each ended call extracts."},
    )
    version = fields.Integer(
        required=True,
        metadata={
            "description": "Its latest version: 1 when created, one more at every change to "
            "what a call uses (GET /agents/:id/versions)."
        },
    )
    created_at = Timestamp(required=True)
    updated_at = Timestamp(required=True)


class AgentListSchema(Schema):
    agents = fields.List(fields.Nested(AgentSchema), required=True)
