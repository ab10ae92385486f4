"""Webhook and delivery schemas: DESIGN.md section 3 (Webhook) and section 4's delivery log."""

from marshmallow import fields, validate

from app.resources.common import (
    PageArgsSchema,
    PaginationSchema,
    Schema,
    previous_secret_expires_at,
)
from app.resources.events.deliveries import DeliverySchema
from app.resources.fields import ReceiverUrl, StrictBoolean, Timestamp, UtcDateTime, unique_items
from app.services.deliveries.log import STATUSES
from app.services.events import EVENT_TYPES
from app.services.webhooks import REPLAY_LIMIT


class WebhookCreateSchema(Schema):
    """Body of POST /webhooks: url, events, secret."""

    url = ReceiverUrl(
        "Receiver address: https, at most 2,048 characters, no user info, a host that is an "
        "IP address or a valid host name (labels of 1 to 63 characters, 253 in all), not a "
        "private or loopback one.",
        required=True,
    )
    events = fields.List(
        fields.String(validate=validate.OneOf(EVENT_TYPES)),
        required=True,
        validate=[validate.Length(min=1, error="Subscribe to at least one event."), unique_items],
        metadata={
            "description": "Event names to receive: " + ", ".join(EVENT_TYPES) + ".",
            "uniqueItems": True,
        },
    )
    secret = fields.String(
        required=True,
        load_only=True,
        validate=validate.Length(16, 256),
        metadata={
            "description": "Shared secret that signs deliveries (16–256 characters); "
            "never returned. In a PATCH it replaces the secret at once: rotate-secret lets "
            "the old one go on signing for a while."
        },
    )


class WebhookUpdateSchema(WebhookCreateSchema):
    """Body of PATCH /webhooks/:id, loaded with partial=True: any of url, events, secret,
    isActive; a field left out keeps its value."""

    is_active = StrictBoolean(
        metadata={"description": "An inactive webhook receives nothing; true re-enables it."},
    )


class WebhookSchema(Schema):
    """A webhook in a response: every field, always, and never the secret."""

    id = fields.String(required=True, metadata={"description": "wh_…"})
    url = fields.String(required=True, metadata={"description": "Receiver address."})
    events = fields.List(
        fields.String(metadata={"enum": EVENT_TYPES}),
        required=True,
        metadata={"description": "Event names it receives."},
    )
    is_active = fields.Boolean(
        required=True,
        metadata={"description": "An inactive webhook receives nothing."},
    )
    secret_hint = fields.Function(
        lambda webhook: webhook.secret[-4:],
        required=True,
        metadata={
            "type": "string",
            "description": "The last 4 characters of the secret (it is never returned).",
        },
    )
    previous_secret_expires_at = previous_secret_expires_at()
    disabled_reason = fields.String(
        required=True,
        allow_none=True,
        metadata={
            "description": "Why the service disabled the webhook (410 Gone, or 5 days "
            "of failures), or null."
        },
    )
    created_at = Timestamp(required=True)
    updated_at = Timestamp(required=True)


class WebhookSecretSchema(WebhookSchema):
    """A webhook whose secret was just rotated, with the new secret: shown only here."""

    secret = fields.String(
        required=True,
        metadata={"description": "The new secret that signs its deliveries. Shown only here."},
    )


class WebhookListSchema(Schema):
    webhooks = fields.List(fields.Nested(WebhookSchema), required=True)


class DeliveryQueryArgsSchema(PageArgsSchema):
    status = fields.String(
        validate=validate.OneOf(STATUSES),
        metadata={"description": "Only deliveries in this status."},
    )


class DeliveryListSchema(Schema):
    deliveries = fields.List(fields.Nested(DeliverySchema), required=True)
    pagination = fields.Nested(PaginationSchema, required=True)


class ReplayRequestSchema(Schema):
    """Body of POST /webhooks/:id/replay: since, until, events."""

    since = UtcDateTime(
        required=True,
        metadata={
            "description": "Replay the events that happened at or after this moment (ISO 8601; "
            "UTC when it has no offset; not before 0001-01-01T00:00:00Z once in UTC)."
        },
    )
    until = UtcDateTime(
        metadata={"description": "…and before this one (default: now); it must be after since."}
    )
    events = fields.List(
        fields.String(validate=validate.OneOf(EVENT_TYPES)),
        validate=[validate.Length(min=1, error="Name at least one event."), unique_items],
        metadata={
            "description": "Only these events (of those the webhook subscribes to); default: "
            "all it subscribes to.",
            "uniqueItems": True,
        },
    )


class ReplaySchema(Schema):
    replayed = fields.Integer(
        required=True,
        metadata={
            "description": "Events queued for delivery to the webhook, a new delivery each "
            f"(at most {REPLAY_LIMIT:,})."
        },
    )
