"""Events, the webhooks they go to, and each delivery's attempts."""

import peewee as pw

from app.db import BaseModel
from app.models.fields import JSONField, RotatedSecret, id_field
from app.models.tenants import Tenant
from app.util import utcnow


class Event(BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="events", on_delete="CASCADE")
    type = pw.CharField(max_length=32)  # call.started, call.ended, …
    data = JSONField()
    created_at = pw.DateTimeField(default=utcnow)  # when it happened: the body's timestamp
    # data's callId, for the events about a call: a call's page finds them by this index.
    call_id = pw.CharField(max_length=32, null=True)
    # The event's place in its tenant's log: 1, 2, 3, … in the order the events committed.
    seq = pw.BigIntegerField()
    delivery_list: list["Delivery"]  # not a column: filled by events.for_call

    class Meta:
        indexes = (
            (("tenant", "seq"), True),
            (("tenant", "created_at"), False),
            (("created_at",), False),
            (("call_id", "created_at"), False),
        )


class Webhook(RotatedSecret, BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="webhooks", on_delete="CASCADE")
    url = pw.CharField(max_length=2048)
    events = JSONField()
    secret = pw.CharField(max_length=256)
    previous_secret = pw.CharField(max_length=256, null=True)  # see RotatedSecret
    previous_secret_expires_at = pw.DateTimeField(null=True)
    is_active = pw.BooleanField(default=True)
    disabled_reason = pw.CharField(max_length=255, null=True)
    failing_since = pw.DateTimeField(null=True)  # first failure since the last success
    # Failed attempts since the last success; the database has the default too, for rows
    # written by code from before it (migration 012).
    consecutive_failures = pw.IntegerField(default=0, constraints=[pw.SQL("DEFAULT 0")])
    # The queue its deliveries go to: "webhooks", or "webhooks_slow" from an attempt that
    # timed out until one is answered in time (migration 016).
    lane = pw.CharField(
        max_length=16, default="webhooks", constraints=[pw.SQL("DEFAULT 'webhooks'")]
    )
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)

    class Meta:
        indexes = ((("tenant", "created_at"), False),)


class Delivery(BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, on_delete="CASCADE")
    webhook = pw.ForeignKeyField(Webhook, backref="deliveries", on_delete="CASCADE")
    event = pw.ForeignKeyField(Event, backref="deliveries", on_delete="CASCADE")
    status = pw.CharField(max_length=16, default="pending")  # pending | succeeded | failed
    attempts = pw.IntegerField(default=0)
    next_attempt_at = pw.DateTimeField(null=True, default=utcnow)
    # In flight (sent to a queue, or being attempted) until then: it counts against its
    # webhook's and tenant's places, and no other job may take it.
    lease_until = pw.DateTimeField(null=True)
    job_id = pw.CharField(max_length=40, null=True)  # the RQ job that is to send it next
    lane = pw.CharField(max_length=16, null=True)  # the queue it was last sent to
    last_status_code = pw.IntegerField(null=True)
    last_error = pw.TextField(null=True)
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)
    completed_at = pw.DateTimeField(null=True)
    attempt_list: list["DeliveryAttempt"]  # not a column: filled by deliveries.with_attempts

    class Meta:
        indexes = (
            (("status", "next_attempt_at"), False),
            (("webhook", "created_at"), False),
            # A webhook's pending deliveries (counted before a replay); its log by status.
            (("webhook", "status", "created_at"), False),
            # The deliveries in flight (lease_until ahead), and a tenant's next ones to send.
            (("status", "lease_until"), False),
            (("tenant", "status", "next_attempt_at"), False),
        )


class DeliveryAttempt(BaseModel):
    id = pw.AutoField()
    delivery = pw.ForeignKeyField(Delivery, backref="attempt_log", on_delete="CASCADE")
    number = pw.IntegerField()
    attempted_at = pw.DateTimeField(default=utcnow)
    duration_ms = pw.IntegerField(null=True)
    status_code = pw.IntegerField(null=True)
    error = pw.TextField(null=True)
    response_excerpt = pw.TextField(null=True)

    class Meta:
        indexes = ((("delivery", "number"), False), (("attempted_at",), False))
