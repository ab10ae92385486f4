"""API keys: created once, stored as SHA-256, several per tenant, revocable."""

import hashlib
import secrets
import string
from datetime import timedelta

from app.db import database, model_rows
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


def revoke_key(*, key_id: str) -> ApiKey:
    """Revoke a key; effective on the next request."""
    with database.atomic():
        record = ApiKey.get_or_none(ApiKey.id == key_id)
        if record is None:
            raise NotFound(f"No API key {key_id}.")
        if record.revoked_at is None:
            record.revoked_at = utcnow()
            record.save(only=[ApiKey.revoked_at])
    return record


AUTH_SQL = """
SELECT t.*, k.id AS key_id, k.last_used_at AS key_last_used_at
FROM api_key k JOIN tenant t ON t.id = k.tenant_id
WHERE k.key_hash = ? AND k.revoked_at IS NULL
"""


def authenticate(*, key: str) -> Tenant | None:
    """The tenant of the active key (with key_id set), or None. Touches lastUsedAt once a minute."""
    if not key.startswith(KEY_PREFIX) or len(key) > 100:
        return None
    found = model_rows(Tenant, AUTH_SQL, [hash_key(key)])
    if not found:
        return None
    tenant = found[0]
    last_used = ApiKey.last_used_at.python_value(tenant.key_last_used_at)
    now = utcnow()
    if last_used is None or now - last_used >= LAST_USED_RESOLUTION:
        stale = now - LAST_USED_RESOLUTION
        with database.atomic():
            ApiKey.update(last_used_at=now).where(
                (ApiKey.id == tenant.key_id)
                & (ApiKey.last_used_at.is_null() | (ApiKey.last_used_at <= stale))
            ).execute()
    return tenant
