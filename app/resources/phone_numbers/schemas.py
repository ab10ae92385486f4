"""Phone number schemas."""

from marshmallow import fields

from app.resources.common import Schema
from app.resources.fields import Timestamp


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
    created_at = Timestamp(dump_only=True, required=True)


class PhoneNumberListSchema(Schema):
    phone_numbers = fields.List(fields.Nested(PhoneNumberSchema), required=True)


class AssignAgentSchema(Schema):
    agent_id = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "An agent of yours, or null to unassign the number."},
    )
