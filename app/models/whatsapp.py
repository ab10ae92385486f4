"""WhatsApp Business accounts linked by tenants (DESIGN.md section 16)."""

import peewee as pw

from app.db import BaseModel
from app.models.fields import id_field
from app.models.tenants import Tenant
from app.util import utcnow


class WhatsAppAccount(BaseModel):
    """A WhatsApp Business account (WABA): its numbers are imported as the tenant's phone
    numbers. The access token and the app secret are stored encrypted (app.vault) and never
    leave the service but to the voice runtime."""

    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="whatsapp_accounts", on_delete="CASCADE")
    waba_id = pw.CharField(max_length=64, unique=True)  # Meta's id, linked by one tenant
    label = pw.CharField(max_length=100, default="")
    access_token_encrypted = pw.TextField()
    app_secret_encrypted = pw.TextField()
    token_hint = pw.CharField(max_length=4)  # the access token's last 4 characters
    status = pw.CharField(max_length=16, default="connected")
    last_synced_at = pw.DateTimeField(null=True)
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "whatsapp_account"
        indexes = ((("tenant", "created_at"), False),)
