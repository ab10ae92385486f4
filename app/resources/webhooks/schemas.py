"""Webhook and delivery schemas: DESIGN.md section 3 (Webhook) and section 4's delivery log."""

from marshmallow import fields, validate

from app.resources.common import PageArgsSchema, PaginationSchema, Schema
from app.resources.fields import ReceiverUrl, StrictBoolean, Timestamp, unique_items
from app.services.deliveries import STATUSES
from app.services.events import EVENT_TYPES


class WebhookSchema(Schema):
    id = fields.String(dump_only=True, metadata={"description": "wh_…"})
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
        metadata={"description": "Shared secret that signs deliveries (16–256 characters)."},
    )
    is_active = StrictBoolean(
        data_key="isActive",
        metadata={"description": "An inactive webhook receives nothing; true re-enables it."},
    )
    secret_hint = fields.Function(
        lambda webhook: webhook.secret[-4:],
        data_key="secretHint",
        dump_only=True,
        metadata={"description": "The last 4 characters of the secret (it is never returned)."},
    )
    disabled_reason = fields.String(
        data_key="disabledReason",
        dump_only=True,
        allow_none=True,
        metadata={
            "description": "Why the service disabled the webhook (410 Gone, or 5 days "
            "of failures), or null."
        },
    )
    created_at = Timestamp(data_key="createdAt", dump_only=True)
    updated_at = Timestamp(data_key="updatedAt", dump_only=True)


class WebhookCreateSchema(WebhookSchema):
    """Body of POST /webhooks: url, events, secret."""

    class Meta(Schema.Meta):
        exclude = ("is_active",)


class WebhookUpdateSchema(WebhookSchema):
    """Body of PATCH /webhooks/:id: any of url, events, secret, isActive."""


class WebhookListSchema(Schema):
    webhooks = fields.List(fields.Nested(WebhookSchema), required=True)


class DeliveryAttemptSchema(Schema):
    number = fields.Integer(metadata={"description": "1-based; the X-Service-Attempt header."})
    attempted_at = Timestamp(data_key="attemptedAt")
    status_code = fields.Integer(
        data_key="statusCode",
        allow_none=True,
        metadata={"description": "The receiver's HTTP status, or null when it did not answer."},
    )
    duration_ms = fields.Integer(
        data_key="durationMs", metadata={"description": "How long the attempt took."}
    )
    error = fields.String(
        allow_none=True, metadata={"description": "Why the attempt failed, or null."}
    )
    response_excerpt = fields.String(
        data_key="responseExcerpt",
        allow_none=True,
        metadata={"description": "The first 2 KiB of the receiver's answer."},
    )


class DeliverySchema(Schema):
    id = fields.String(metadata={"description": "dlv_…; the X-Service-Delivery-Id header."})
    webhook_id = fields.String(data_key="webhookId", metadata={"description": "wh_…"})
    event_id = fields.String(
        data_key="eventId",
        metadata={"description": "evt_…; the X-Service-Event-Id and webhook-id headers."},
    )
    event = fields.Function(
        lambda delivery: delivery.event.type, metadata={"description": "The event name."}
    )
    status = fields.String(
        metadata={
            "description": "pending (not yet delivered, maybe retrying), succeeded or failed.",
            "enum": STATUSES,
        }
    )
    attempt_count = fields.Integer(
        attribute="attempts",
        data_key="attemptCount",
        metadata={"description": "Attempts made so far (at most 8 on the automatic schedule)."},
    )
    next_attempt_at = Timestamp(
        data_key="nextAttemptAt",
        allow_none=True,
        metadata={"description": "When the next attempt is due, or null when settled."},
    )
    last_status_code = fields.Integer(
        data_key="lastStatusCode",
        allow_none=True,
        metadata={"description": "The receiver's status at the last attempt, or null."},
    )
    last_error = fields.String(
        data_key="lastError",
        allow_none=True,
        metadata={"description": "Why the last attempt failed, or null."},
    )
    created_at = Timestamp(data_key="createdAt")
    completed_at = Timestamp(
        data_key="completedAt",
        allow_none=True,
        metadata={"description": "When it succeeded or failed for good, or null."},
    )
    attempts = fields.List(
        fields.Nested(DeliveryAttemptSchema),
        attribute="attempt_list",
        metadata={"description": "Every attempt, oldest first."},
    )


class DeliveryQueryArgsSchema(PageArgsSchema):
    status = fields.String(
        validate=validate.OneOf(STATUSES),
        metadata={"description": "Only deliveries in this status."},
    )


class DeliveryListSchema(Schema):
    deliveries = fields.List(fields.Nested(DeliverySchema), required=True)
    pagination = fields.Nested(PaginationSchema, required=True)
