"""API keys: created once, stored as SHA-256, several per tenant, revocable."""

import hashlib
import secrets
import string
from datetime import timedelta

from app.db import database
from app.errors import NotFound
from app.models import ApiKey, Tenant
from app.util import new_id, utcnow

KEY_PREFIX = "dkl_"
_BASE62 = string.ascii_letters + string.digits
LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()


def create_key(*, tenant: Tenant, name: str) -> tuple[ApiKey, str]:
    """Create a key; return the record and the plaintext key (shown once, never stored)."""
    key = KEY_PREFIX + "".join(secrets.choice(_BASE62) for _ in range(40))
    with database.atomic():
        record = ApiKey.create(
            id=new_id("key"),
            tenant=tenant,
            name=name,
            prefix=key[:12],
            key_hash=hash_key(key),
        )
    return record, key


def list_keys(*, tenant: Tenant) -> list[ApiKey]:
    return list(ApiKey.select().where(ApiKey.tenant == tenant).order_by(ApiKey.created_at))


def revoke_key(*, key_id: str) -> tuple[ApiKey, bool]:
    """Revoke a key, effective on the next request; the key, and whether this call revoked it
    (False: it was revoked already, and keeps the time it was revoked at)."""
    with database.atomic():
        revoked = (
            ApiKey.update(revoked_at=utcnow())
            .where((ApiKey.id == key_id) & ApiKey.revoked_at.is_null())
            .execute()
        )
        record = ApiKey.get_or_none(ApiKey.id == key_id)
    if record is None:
        raise NotFound(f"No API key {key_id}.")
    return record, bool(revoked)


def authenticate(*, key: str) -> Tenant | None:
    """The tenant of the active key, or None. Touches the key's lastUsedAt once a minute."""
    if not key.startswith(KEY_PREFIX) or len(key) > 100:
        return None
    record = (
        ApiKey.select(ApiKey.id, ApiKey.last_used_at, Tenant)
        .join(Tenant)
        .where((ApiKey.key_hash == hash_key(key)) & ApiKey.revoked_at.is_null())
        .first()
    )
    if record is None:
        return None
    now = utcnow()
    if record.last_used_at is None or now - record.last_used_at >= LAST_USED_RESOLUTION:
        stale = now - LAST_USED_RESOLUTION
        with database.atomic():
            ApiKey.update(last_used_at=now).where(
                (ApiKey.id == record.id)
                & (ApiKey.last_used_at.is_null() | (ApiKey.last_used_at <= stale))
            ).execute()
    return record.tenant
