"""Phone numbers, the agent that answers each, and what Meta said about calling each
WhatsApp user from a WhatsApp number."""

import peewee as pw

from app.db import BaseModel
from app.models.agents import Agent
from app.models.fields import id_field
from app.models.tenants import Tenant
from app.models.whatsapp import WhatsAppAccount
from app.util import utcnow


class PhoneNumber(BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="phone_numbers", on_delete="CASCADE")
    display_number = pw.CharField(max_length=16, unique=True)
    label = pw.CharField(max_length=100, default="")
    is_active = pw.BooleanField(default=True)
    agent = pw.ForeignKeyField(Agent, null=True, backref="phone_numbers", on_delete="SET NULL")
    # The agent's version its calls are answered with; None: the agent's latest.
    agent_version = pw.IntegerField(null=True)
    # phone (added by an admin, for a telephony provider) or whatsapp (imported from a
    # WhatsApp Business account, app.models.whatsapp).
    channel = pw.CharField(max_length=16, default="phone")
    whatsapp_account = pw.ForeignKeyField(
        WhatsAppAccount, null=True, backref="numbers", on_delete="SET NULL"
    )
    whatsapp_phone_number_id = pw.CharField(max_length=64, null=True, unique=True)  # Meta's
    quality_rating = pw.CharField(max_length=16, null=True)  # GREEN, YELLOW, RED, UNKNOWN
    # Whether the tenant chose the label: an import sets it to the verified name until then.
    label_set = pw.BooleanField(default=False)
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)

    class Meta:
        indexes = ((("tenant", "created_at"), False),)


class CallPermission(BaseModel):
    """What Meta last said about calling one WhatsApp user from one business number, or the
    user's last permission reply the runtime forwarded: no_permission, temporary (until
    expires_at) or permanent."""

    phone_number = pw.ForeignKeyField(PhoneNumber, backref="call_permissions", on_delete="CASCADE")
    user_number = pw.CharField(max_length=16)  # E.164, "+" and the user's digits
    status = pw.CharField(max_length=16, default="no_permission")
    expires_at = pw.DateTimeField(null=True)
    can_call = pw.BooleanField(default=False)
    can_request = pw.BooleanField(default=True)
    last_requested_at = pw.DateTimeField(null=True)  # our last permission request
    checked_at = pw.DateTimeField(default=utcnow)  # when Meta or the user last told us
    updated_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "call_permission"
        primary_key = pw.CompositeKey("phone_number", "user_number")
