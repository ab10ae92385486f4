"""Phone numbers and the agent that answers each."""

import peewee as pw

from app.db import BaseModel
from app.models.agents import Agent
from app.models.fields import id_field
from app.models.tenants import Tenant
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
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)

    class Meta:
        indexes = ((("tenant", "created_at"), False),)
