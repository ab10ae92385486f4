"""API keys: created once, stored as SHA-256, several per tenant, revocable; a scope (full,
or read: GET only) and an optional expiry."""

import hashlib
import secrets
import string
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.db import transaction, unit_of_work
from app.errors import NotFound, ValidationFailed
from app.models import ApiKey, Tenant
from app.services import audit, limits
from app.services.audit import Actor
from app.util import new_id, utcnow

KEY_PREFIX = "dkl_"
_BASE62 = string.ascii_letters + string.digits
LAST_USED_RESOLUTION = timedelta(minutes=1)
# What a request authenticated by a key reads of its tenant: the id that scopes every query,
# the name, and what the rate limiter and call admission need. Services that answer with the
# tenant's counters (balance, holds) read its row as stored now (billing.get_balance), so the
# key's lookup need not carry the other columns through every request.
REQUEST_TENANT_FIELDS = (
    Tenant.id,
    Tenant.name,
    Tenant.plan,
    Tenant.rate_limit,
    Tenant.concurrent_call_limit,
)
SCOPES = ("full", "read")
# The longest expiry accepted: beyond it a date could overflow; the dashboard offers 30-365.
MAX_EXPIRY_DAYS = 36_500


@dataclass(frozen=True)
class Authenticated:
    """Who an active key lets in, and what it may do."""

    key_id: str
    tenant: Tenant  # with REQUEST_TENANT_FIELDS only: counters are read where they are shown
    scope: str
    name: str
    prefix: str

    @property
    def id(self) -> str:
        return self.key_id

    @property
    def read_only(self) -> bool:
        return self.scope == "read"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()


def create_key(
    *,
    tenant: Tenant,
    actor: Actor,
    name: str,
    scope: str = "full",
    expires_in_days: int | None = None,
) -> tuple[ApiKey, str]:
    """Create a key; return the record and the plaintext key (shown once, never stored).

    scope is "full" or "read" (GET only); expires_in_days None means the key never expires.
    """
    if scope not in SCOPES:
        raise ValidationFailed(f"Unknown scope {scope!r}: use one of {', '.join(SCOPES)}.")
    if expires_in_days is not None and (
        isinstance(expires_in_days, bool)
        or not isinstance(expires_in_days, int)
        or not 1 <= expires_in_days <= MAX_EXPIRY_DAYS
    ):
        raise ValidationFailed(
            f"A key expires after 1 to {MAX_EXPIRY_DAYS} days, or never (no expiry)."
        )
    key = KEY_PREFIX + "".join(secrets.choice(_BASE62) for _ in range(40))
    now = utcnow()
    with unit_of_work():
        limits.check(tenant.id, "apiKeys")
        record = ApiKey.create(
            id=new_id("key"),
            tenant=tenant,
            name=name,
            prefix=key[:12],
            key_hash=hash_key(key),
            scope=scope,
            created_at=now,
            expires_at=None if expires_in_days is None else now + timedelta(days=expires_in_days),
        )
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="key.created",
            target_id=record.id,
            details={"name": name, "scope": scope},
        )
    return record, key


def list_keys(*, tenant: Tenant) -> list[ApiKey]:
    return list(ApiKey.select().where(ApiKey.tenant == tenant).order_by(ApiKey.created_at))


def get_key(*, tenant: Tenant, key_id: str) -> ApiKey:
    """The tenant's key, or NotFound (also for another tenant's key)."""
    record = ApiKey.get_or_none((ApiKey.id == key_id) & (ApiKey.tenant == tenant))
    if record is None:
        raise NotFound(f"No API key {key_id}.")
    return record


def revoke_key(*, key_id: str, actor: Actor) -> tuple[ApiKey, bool]:
    """Revoke a key, effective on the next request; the key, and whether this call revoked it
    (False: it was revoked already, and keeps the time it was revoked at; no audit entry)."""
    with unit_of_work():
        revoked = (
            ApiKey.update(revoked_at=utcnow())
            .where((ApiKey.id == key_id) & ApiKey.revoked_at.is_null())
            .execute()
        )
        record = ApiKey.get_or_none(ApiKey.id == key_id)
        if record is None:
            raise NotFound(f"No API key {key_id}.")
        if revoked:
            audit.write(actor, tenant_id=record.tenant_id, action="key.revoked", target_id=key_id)
    return record, bool(revoked)


def state(record: ApiKey, now: datetime) -> str:
    """Whether the key is "active", "revoked" or "expired" at `now`."""
    if record.revoked_at is not None:
        return "revoked"
    if record.expires_at is not None and record.expires_at <= now:
        return "expired"
    return "active"


def authenticate(*, key: str) -> Authenticated | None:
    """The tenant and scope of the key if it is active (neither revoked nor expired), else
    None, in one SELECT. Touches the key's lastUsedAt once a minute.

    The SELECT finds the key by its hash alone (unique) and whether it is still active is
    checked here: a query builder condition per column costs more on every request than
    reading the two columns."""
    if not key.startswith(KEY_PREFIX) or len(key) > 100:
        return None
    now = utcnow()
    record = (
        ApiKey.select(
            ApiKey.id,
            ApiKey.name,
            ApiKey.prefix,
            ApiKey.scope,
            ApiKey.last_used_at,
            ApiKey.revoked_at,
            ApiKey.expires_at,
            *REQUEST_TENANT_FIELDS,
        )
        .join(Tenant)
        .where(ApiKey.key_hash == hash_key(key))
        .first()
    )
    if record is None or state(record, now) != "active":
        return None
    if record.last_used_at is None or now - record.last_used_at >= LAST_USED_RESOLUTION:
        stale = now - LAST_USED_RESOLUTION
        with transaction():
            ApiKey.update(last_used_at=now).where(
                (ApiKey.id == record.id)
                & (ApiKey.last_used_at.is_null() | (ApiKey.last_used_at <= stale))
            ).execute()
    return Authenticated(
        key_id=record.id,
        tenant=record.tenant,
        scope=record.scope,
        name=record.name,
        prefix=record.prefix,
    )
