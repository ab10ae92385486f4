"""An agent's functions and their invocations in calls."""

import peewee as pw

from app.db import BaseModel
from app.models.agents import Agent
from app.models.calls import Call
from app.models.fields import JSONField, RotatedSecret, id_field
from app.models.tenants import Tenant
from app.util import utcnow


class Function(RotatedSecret, BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, on_delete="CASCADE")
    agent = pw.ForeignKeyField(Agent, backref="functions", on_delete="CASCADE")
    name = pw.CharField(max_length=64)
    description = pw.TextField(default="")
    endpoint = pw.CharField(max_length=2048)
    method = pw.CharField(max_length=8, default="POST")
    parameters = JSONField()
    signing_secret = pw.CharField(max_length=256)
    previous_secret = pw.CharField(max_length=256, null=True)  # see RotatedSecret
    previous_secret_expires_at = pw.DateTimeField(null=True)
    # The endpoint's budget in live calls and tests (500–5000); the database has the default
    # too, for rows written by code from before it (migration 009).
    timeout_ms = pw.IntegerField(default=5000, constraints=[pw.SQL("DEFAULT 5000")])
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)
    # A deleted function keeps its row (and its signing secret) while versions of its agent
    # have it: calls answered with such a version still call it, and a restore brings it back.
    deleted_at = pw.DateTimeField(null=True)

    class Meta:
        # Unique among the live functions (deleted_at IS NULL): a partial index of migration
        # 017, which a model's index list cannot state.
        indexes = ((("agent", "name"), False),)


class FunctionInvocation(BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, on_delete="CASCADE")
    call = pw.ForeignKeyField(Call, backref="function_invocations", on_delete="CASCADE")
    function = pw.ForeignKeyField(Function, null=True, on_delete="SET NULL")
    function_name = pw.CharField(max_length=64)
    parameters = JSONField(default=dict)
    status = pw.CharField(max_length=16, default="pending")  # pending | succeeded | failed
    result = JSONField(null=True)
    error_code = pw.CharField(max_length=64, null=True)
    error_message = pw.TextField(null=True)
    http_status = pw.IntegerField(null=True)
    latency_ms = pw.IntegerField(null=True)
    created_at = pw.DateTimeField(default=utcnow)
    completed_at = pw.DateTimeField(null=True)

    class Meta:
        indexes = ((("call", "created_at"), False),)
