"""Tenants, their API keys, and the dashboard's users and sessions."""

import peewee as pw

from app.db import BaseModel
from app.models.fields import id_field
from app.util import utcnow


class Tenant(BaseModel):
    id = id_field()
    name = pw.CharField(max_length=100, unique=True)
    plan = pw.CharField(max_length=20, default="starter")
    rate_limit = pw.IntegerField(null=True)  # requests per minute; None = the plan's
    low_balance_threshold = pw.IntegerField(default=10)
    balance_minutes = pw.BigIntegerField(default=0)
    lifetime_purchased_minutes = pw.BigIntegerField(default=0)
    lifetime_used_minutes = pw.BigIntegerField(default=0)
    reserved_minutes = pw.BigIntegerField(default=0)  # held by open calls: the sum of their holds
    calls_count = pw.BigIntegerField(default=0)  # maintained total for call-list pagination
    # Calls at once: None = the plan's (app.services.tenants.concurrent_call_limit_of).
    concurrent_call_limit = pw.IntegerField(null=True)
    # The calls admitted and not yet ended (or whose hold lapsed): taken with each call's hold,
    # freed with it, so admission compares it with the limit instead of counting calls. The
    # database has the default too, for rows written by code from before it (migration 010).
    active_calls = pw.BigIntegerField(default=0, constraints=[pw.SQL("DEFAULT 0")])
    # The seq of the tenant's latest event: each new event takes the next one (events.record).
    event_seq = pw.BigIntegerField(default=0)
    created_at = pw.DateTimeField(default=utcnow)

    @property
    def available_minutes(self) -> int:
        """What new calls may still hold: the balance less the open calls' holds."""
        return self.balance_minutes - self.reserved_minutes


class ApiKey(BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="api_keys", on_delete="CASCADE")
    name = pw.CharField(max_length=100)
    prefix = pw.CharField(max_length=16)  # first characters of the key, for recognising it
    key_hash = pw.CharField(max_length=64, unique=True)  # SHA-256 hex; the key is never stored
    created_at = pw.DateTimeField(default=utcnow)
    scope = pw.CharField(max_length=8, default="full")  # full | read (GET only)
    last_used_at = pw.DateTimeField(null=True)
    expires_at = pw.DateTimeField(null=True)  # None: never
    revoked_at = pw.DateTimeField(null=True)


class User(BaseModel):
    """A dashboard user of one tenant (the API itself uses keys, not users)."""

    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="users", on_delete="CASCADE")
    email = pw.CharField(max_length=254, unique=True)  # stored lower-case
    password_hash = pw.CharField(max_length=255)  # werkzeug's scrypt hash; never the password
    role = pw.CharField(max_length=16, default="viewer")  # owner | admin | viewer
    created_at = pw.DateTimeField(default=utcnow)
    last_sign_in_at = pw.DateTimeField(null=True)
    # Changed with the password and on disabling: sessions signed with an older one end.
    session_version = pw.IntegerField(default=1)
    disabled_at = pw.DateTimeField(null=True)


class UserSession(BaseModel):
    """A signed-in dashboard session, named by the id in the session cookie: signing out
    deletes it, so a copy of the cookie taken before is refused afterwards."""

    id = pw.CharField(max_length=64, primary_key=True)  # random, in the signed cookie
    user = pw.ForeignKeyField(User, backref="sessions", on_delete="CASCADE")
    created_at = pw.DateTimeField(default=utcnow, index=True)
