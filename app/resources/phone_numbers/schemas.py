"""Phone number schemas."""

from typing import Any

from marshmallow import ValidationError, fields, validate, validates_schema

from app.resources.calls.schemas import CalleeNumber
from app.resources.common import Schema
from app.resources.fields import MAX_INT32, StrictInteger, Timestamp
from app.services.phone_numbers import CHANNELS
from app.services.whatsapp import permissions


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


class CallPermissionArgsSchema(Schema):
    to = CalleeNumber(
        required=True,
        metadata={"description": "The WhatsApp user's number, international format (+62…)."},
    )


class CallPermissionSchema(Schema):
    to = fields.String(required=True, metadata={"description": "The user's number."})
    status = fields.String(
        required=True,
        metadata={
            "description": "no_permission, temporary (until expiresAt; Meta grants 7 days) or "
            "permanent.",
            "enum": permissions.STATUSES,
        },
    )
    expires_at = Timestamp(
        required=True,
        allow_none=True,
        metadata={"description": "When a temporary permission ends; null otherwise."},
    )
    can_call = fields.Boolean(
        required=True, metadata={"description": "Whether Meta lets the number call the user now."}
    )
    can_request = fields.Boolean(
        required=True,
        metadata={
            "description": "Whether Meta lets the number send the user a permission request "
            "now (1 a day and 2 a week per number and user)."
        },
    )


class TemplateSchema(Schema):
    name = fields.String(
        required=True,
        validate=validate.Length(1, 512),
        metadata={"description": "An approved template with a call permission request button."},
    )
    language = fields.String(
        required=True,
        validate=validate.Length(2, 15),
        metadata={"description": "The template's language code, e.g. id or en_US."},
    )


class PermissionRequestFieldsSchema(Schema):
    """What a permission request says: free-form text, or a template."""

    text = fields.String(
        validate=validate.Length(1, permissions.MAX_TEXT),
        metadata={
            "description": "The message's body (at most 1,024 characters); default a sentence "
            "in Bahasa Indonesia. Free-form: only within 24 hours of the user's last message."
        },
    )
    template = fields.Nested(
        TemplateSchema,
        metadata={"description": "Send this template instead (outside the 24-hour window)."},
    )

    @validates_schema
    def text_or_template(self, data: dict[str, Any], **kwargs: Any) -> None:
        if "text" in data and "template" in data:
            raise ValidationError("Send text or template, not both.", "template")


class CallPermissionRequestSchema(PermissionRequestFieldsSchema):
    """Body of POST /phone-numbers/:id/call-permission-requests."""

    to = CalleeNumber(
        required=True,
        metadata={"description": "The WhatsApp user's number, international format (+62…)."},
    )


class CallPermissionRequestedSchema(Schema):
    to = fields.String(required=True, metadata={"description": "The user's number."})
    status = fields.String(
        required=True, metadata={"description": "requested.", "enum": ["requested"]}
    )
    message_id = fields.String(
        required=True, metadata={"description": "Meta's id of the message sent (wamid.…)."}
    )
