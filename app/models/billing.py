"""The credit ledger: every change of a tenant's balance."""

import peewee as pw

from app.db import BaseModel
from app.models.calls import Call
from app.models.fields import id_field
from app.models.tenants import Tenant
from app.util import utcnow


class CreditTransaction(BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="credit_transactions", on_delete="CASCADE")
    type = pw.CharField(max_length=16)  # purchase | usage | adjustment | refund
    minutes = pw.BigIntegerField()  # signed: usage is negative
    balance_after = pw.BigIntegerField()
    call = pw.ForeignKeyField(Call, null=True, on_delete="SET NULL")
    description = pw.CharField(max_length=255, default="")
    # Makes a charge happen once, e.g. "usage:call_…"; None for free-standing entries.
    idempotency_key = pw.CharField(max_length=128, null=True, unique=True)
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        indexes = (
            (("tenant", "created_at", "id"), False),
            (("tenant", "type", "created_at", "id"), False),
        )
