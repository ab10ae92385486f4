"""Audit log schemas: DESIGN.md section 14 (GET /audit-log)."""

from marshmallow import fields, validate

from app.resources.common import Schema
from app.resources.fields import DateOrTimestamp, Timestamp
from app.services.audit import ACTOR_TYPES

ENTRY_ID = r"^aud_[a-z0-9]{20}$"
ACTION = r"^[a-z_]{1,31}\.[a-z_]{1,32}$"


class AuditQueryArgsSchema(Schema):
    """Query parameters of GET /audit-log."""

    action = fields.String(
        validate=validate.Regexp(ACTION, error="Not an action name such as agent.updated."),
        metadata={"description": "Only entries of this action, e.g. number.assigned."},
    )
    actor_type = fields.String(
        validate=validate.OneOf(ACTOR_TYPES),
        metadata={"description": "Only changes made by this kind of actor.", "enum": ACTOR_TYPES},
    )
    since = DateOrTimestamp(
        metadata={"description": "Only entries with createdAt >= this (a date means 00:00Z)."}
    )
    after = fields.String(
        validate=validate.Regexp(ENTRY_ID, error="Not an audit entry id (aud_ and 20 characters)."),
        metadata={
            "description": "List the entries older than this one (the nextAfter of the page "
            "before); without it, from the newest. An id that is not one of your entries is 404."
        },
    )
    limit = fields.Integer(
        load_default=50,
        validate=validate.Range(1, 100),
        metadata={"description": "Page size, 1–100 (default 50)."},
    )


class AuditActorSchema(Schema):
    type = fields.String(
        required=True,
        metadata={
            "description": "api_key, user (the dashboard) or cli; runtime and system for "
            "changes the service made itself.",
            "enum": ACTOR_TYPES,
        },
    )
    id = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "The API key's or the user's id (null for the CLI)."},
    )
    label = fields.String(
        required=True,
        metadata={
            "description": "An API key's name and prefix (`production (dkl_AbCd…)`), a user's "
            "email (the one tried, for a failed sign-in), or CLI."
        },
    )


class AuditEntrySchema(Schema):
    id = fields.String(required=True, metadata={"description": "aud_ and 20 characters."})
    created_at = Timestamp(required=True)
    actor = fields.Nested(AuditActorSchema, required=True)
    action = fields.String(
        required=True, metadata={"description": "What was done, e.g. agent.updated."}
    )
    target_id = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "The id of what was changed (an agent, a webhook, …)."},
    )
    details = fields.Dict(
        required=True,
        metadata={
            "description": "What the target does not tell: the fields an update changed "
            "(fields, as the API names them), linked ids (agentId, …), an action's parameters "
            "(a replay's range and count, a rotation's overlap). Never a value typed into a "
            "field, never a secret."
        },
    )
    ip = fields.String(
        required=True,
        allow_none=True,
        attribute="address",
        metadata={"description": "The client's IP address (null for the CLI)."},
    )


class AuditLogSchema(Schema):
    entries = fields.List(
        fields.Nested(AuditEntrySchema), required=True, metadata={"description": "Newest first."}
    )
    has_more = fields.Boolean(
        required=True, metadata={"description": "Whether older entries follow this page."}
    )
    next_after = fields.String(
        required=True,
        allow_none=True,
        metadata={
            "description": "Pass it as after for the next page: the last entry of this page "
            "(the after given, when the page is empty; null when there are no entries)."
        },
    )
