"""An event's deliveries to webhooks: in the webhooks' delivery log and in an event's detail."""

from marshmallow import fields

from app.resources.common import Schema
from app.resources.fields import Timestamp
from app.services.deliveries.log import STATUSES


class DeliveryAttemptSchema(Schema):
    number = fields.Integer(
        required=True, metadata={"description": "1-based; the X-Service-Attempt header."}
    )
    attempted_at = Timestamp(required=True)
    status_code = fields.Integer(
        required=True,
        allow_none=True,
        metadata={"description": "The receiver's HTTP status, or null when it did not answer."},
    )
    duration_ms = fields.Integer(
        required=True, metadata={"description": "How long the attempt took."}
    )
    error = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "Why the attempt failed, or null."},
    )
    response_excerpt = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "The first 2 KiB of the receiver's answer."},
    )


class DeliverySchema(Schema):
    id = fields.String(
        required=True, metadata={"description": "dlv_…; the X-Service-Delivery-Id header."}
    )
    webhook_id = fields.String(required=True, metadata={"description": "wh_…"})
    event_id = fields.String(
        required=True,
        metadata={"description": "evt_…; the X-Service-Event-Id and webhook-id headers."},
    )
    event = fields.String(
        attribute="event.type", required=True, metadata={"description": "The event name."}
    )
    status = fields.String(
        required=True,
        metadata={
            "description": "pending (not yet delivered, maybe retrying), succeeded or failed.",
            "enum": STATUSES,
        },
    )
    attempt_count = fields.Integer(
        attribute="attempts",
        required=True,
        metadata={"description": "Attempts made so far (at most 8 on the automatic schedule)."},
    )
    next_attempt_at = Timestamp(
        required=True,
        allow_none=True,
        metadata={"description": "When the next attempt is due, or null when settled."},
    )
    last_status_code = fields.Integer(
        required=True,
        allow_none=True,
        metadata={"description": "The receiver's status at the last attempt, or null."},
    )
    last_error = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "Why the last attempt failed, or null."},
    )
    created_at = Timestamp(required=True)
    completed_at = Timestamp(
        required=True,
        allow_none=True,
        metadata={"description": "When it succeeded or failed for good, or null."},
    )
    attempts = fields.List(
        fields.Nested(DeliveryAttemptSchema),
        attribute="attempt_list",
        required=True,
        metadata={"description": "Every attempt, oldest first."},
    )
