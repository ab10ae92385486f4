"""Tenant API POSTs' Idempotency-Keys and the answers they replay."""

import peewee as pw

from app.db import BaseModel
from app.models.fields import JSONField, id_field
from app.models.tenants import Tenant
from app.util import utcnow


class IdempotencyKey(BaseModel):
    """A tenant API POST's Idempotency-Key: held while its first request runs, then the answer
    that request gave, replayed to a repeat of it for 24 hours (app.services.idempotency)."""

    id = id_field()  # a new one each time the key is taken: the holder's token
    tenant = pw.ForeignKeyField(Tenant, on_delete="CASCADE")
    key = pw.CharField(max_length=255)
    fingerprint = pw.CharField(max_length=64)  # SHA-256 hex of the method, path and body
    state = pw.CharField(max_length=8, default="running")  # running | done
    # While running: when the key may be taken again (the request's process died).
    lease_until = pw.DateTimeField(null=True)
    status_code = pw.IntegerField(null=True)
    body = pw.TextField(null=True)
    headers = JSONField(null=True)  # the answer's headers worth keeping (Content-Type, Location)
    created_at = pw.DateTimeField(default=utcnow)  # the 24 hours count from here

    class Meta:
        indexes = ((("tenant", "key"), True), (("created_at",), False))
