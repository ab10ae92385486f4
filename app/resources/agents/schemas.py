"""Agent schemas: SPEC.md's fields in camelCase, DESIGN.md section 3's rules."""

from marshmallow import fields, validate

from app.resources.common import Schema
from app.resources.fields import StrictBoolean, StrictInteger, Timestamp, unique_items

VOICES = ("Puck", "Charon", "Kore", "Fenrir", "Aoede")
LANGUAGE = r"^[a-z]{2,3}(-[A-Z]{2})?$"
E164 = r"^\+[1-9]\d{6,14}$"
TOOL_NAME = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"


class AgentSchema(Schema):
    id = fields.String(dump_only=True, metadata={"description": "agent_…", "example": "agent_x"})
    name = fields.String(
        required=True, validate=validate.Length(1, 100), metadata={"description": "Display name."}
    )
    system_prompt = fields.String(
        data_key="systemPrompt",
        required=True,
        validate=validate.Length(1, 20_000),
        metadata={"description": "Instructions and persona for the AI (1–20,000 characters)."},
    )
    voice_id = fields.String(
        data_key="voiceId",
        load_default="Puck",
        validate=validate.OneOf(VOICES),
        metadata={"description": "One of Puck, Charon, Kore, Fenrir, Aoede.", "enum": VOICES},
    )
    greeting_text = fields.String(
        data_key="greetingText",
        load_default="",
        validate=validate.Length(max=2_000),
        metadata={"description": "What the agent says when it answers."},
    )
    language = fields.String(
        load_default="id",
        validate=validate.Regexp(LANGUAGE, error="Must be a language tag such as id or en-US."),
        metadata={"description": "BCP 47 language tag; default id (Bahasa Indonesia)."},
    )
    max_call_duration_minutes = StrictInteger(
        data_key="maxCallDurationMinutes",
        load_default=10,
        validate=validate.Range(1, 120),
        metadata={"description": "Calls are cut off after this many minutes (1–120)."},
    )
    tools_enabled = fields.List(
        fields.String(validate=validate.Regexp(TOOL_NAME, error="Not a valid tool name.")),
        data_key="toolsEnabled",
        load_default=list,
        validate=[validate.Length(max=64), unique_items],
        metadata={"description": "Names of the tools enabled for the agent.", "uniqueItems": True},
    )
    is_active = StrictBoolean(
        data_key="isActive",
        load_default=True,
        metadata={"description": "An inactive agent does not answer calls."},
    )
    escalation_number = fields.String(
        data_key="escalationNumber",
        load_default=None,
        allow_none=True,
        validate=validate.Regexp(
            E164, error="Must be an international number such as +6281234567."
        ),
        metadata={"description": "Number for human escalation (E.164), or null."},
    )
    created_at = Timestamp(data_key="createdAt", dump_only=True)
    updated_at = Timestamp(data_key="updatedAt", dump_only=True)


class AgentCreateSchema(AgentSchema):
    """Body of POST /agents."""


class AgentUpdateSchema(AgentSchema):
    """Body of PATCH /agents/:id: any subset of the writable fields."""


class AgentListSchema(Schema):
    agents = fields.List(fields.Nested(AgentSchema), required=True)
