"""Phone number schemas."""

from marshmallow import fields, validate

from app.resources.common import Schema
from app.resources.fields import MAX_INT32, StrictInteger, Timestamp
from app.services.phone_numbers import CHANNELS


class PhoneNumberSchema(Schema):
    id = fields.String(dump_only=True, required=True, metadata={"description": "pn_…"})
    display_number = fields.String(
        dump_only=True,
        required=True,
        metadata={"description": "International format with a leading +."},
    )
    label = fields.String(
        dump_only=True, required=True, metadata={"description": "Free-text label."}
    )
    is_active = fields.Boolean(
        dump_only=True,
        required=True,
        metadata={"description": "An inactive number does not take calls."},
    )
    agent_id = fields.String(
        dump_only=True,
        required=True,
        allow_none=True,
        metadata={"description": "The assigned agent, or null."},
    )
    agent_version = fields.Integer(
        dump_only=True,
        required=True,
        allow_none=True,
        metadata={
            "description": "The agent's version its calls are answered with (pinned), or null: "
            "the agent's latest version at each call."
        },
    )
    channel = fields.String(
        dump_only=True,
        required=True,
        metadata={
            "enum": list(CHANNELS),
            "description": "phone: added by the operator, for a telephony provider; whatsapp: "
            "imported from one of your WhatsApp Business accounts.",
        },
    )
    whatsapp_phone_number_id = fields.String(
        dump_only=True,
        required=True,
        allow_none=True,
        metadata={"description": "Meta's id of the WhatsApp number, or null (channel phone)."},
    )
    quality_rating = fields.String(
        dump_only=True,
        required=True,
        allow_none=True,
        metadata={
            "description": "Meta's quality rating of the WhatsApp number at the last sync "
            "(GREEN, YELLOW, RED or UNKNOWN), or null (channel phone)."
        },
    )
    created_at = Timestamp(dump_only=True, required=True)


class PhoneNumberQueryArgsSchema(Schema):
    channel = fields.String(
        validate=validate.OneOf(CHANNELS),
        metadata={"description": "Only the numbers of this channel: phone or whatsapp."},
    )


class PhoneNumberListSchema(Schema):
    phone_numbers = fields.List(fields.Nested(PhoneNumberSchema), required=True)


class AssignAgentSchema(Schema):
    agent_id = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "An agent of yours, or null to unassign the number."},
    )
    agent_version = StrictInteger(
        load_default=None,
        allow_none=True,
        validate=validate.Range(1, MAX_INT32),
        metadata={
            "description": "Pin the number to this version of the agent (one it has, else "
            "422): its calls are answered with that version until the number is assigned "
            "again. Absent or null: the number follows the agent's latest version."
        },
    )
