"""Audit log: every change made from the dashboard or the CLI, per tenant, newest first."""

from datetime import datetime
from typing import Any

from app.models import AuditEntry, Tenant
from app.services.pages import Page, paginate
from app.util import new_id

ACTOR_TYPES = ("user", "cli", "system")
# Detail names that would hold a secret: an entry never stores one (a key is named by its id).
SECRET_DETAILS = frozenset({"key", "apiKey", "password", "secret", "signingSecret", "token"})
LABEL_LENGTH = AuditEntry.actor_label.max_length
ADDRESS_LENGTH = AuditEntry.address.max_length


def _label(text: str) -> str:
    """The label as stored: a sign-in form may send an email of any length."""
    return text[:LABEL_LENGTH]


def record(
    *,
    tenant_id: str | None,
    action: str,
    actor_type: str,
    actor_label: str,
    target_id: str | None = None,
    actor_id: str | None = None,
    address: str | None = None,
    details: dict[str, Any] | None = None,
) -> AuditEntry:
    """Write one entry. Call it inside the transaction of the change it records, so the
    change and its entry commit together (or neither does). tenant_id is None only for a
    failed sign-in with an email no user has."""
    if actor_type not in ACTOR_TYPES:
        raise ValueError(f"actor_type is one of {', '.join(ACTOR_TYPES)}, not {actor_type!r}")
    details = dict(details or {})
    secret = SECRET_DETAILS.intersection(details)
    if secret:
        raise ValueError(f"audit details never hold secrets: {', '.join(sorted(secret))}")
    return AuditEntry.create(
        id=new_id("aud"),
        tenant=tenant_id,
        action=action,
        actor_type=actor_type,
        actor_id=actor_id,
        actor_label=_label(actor_label),
        target_id=target_id,
        address=address[:ADDRESS_LENGTH] if address else None,
        details=details,
    )


def list_entries(*, tenant: Tenant, limit: int, offset: int) -> Page:
    """One page of the tenant's entries, newest first (index tenant, created_at, id)."""
    query = (
        AuditEntry.select()
        .where(AuditEntry.tenant == tenant)
        .order_by(AuditEntry.created_at.desc(), AuditEntry.id.desc())
    )
    return paginate(query, limit=limit, offset=offset)


def count_recent(
    *, action: str, since: datetime, email: str | None = None, address: str | None = None
) -> int:
    """Entries of action since then, of every tenant, matching each filter given: email
    (compared with actor_label, as recorded: pass the normalised email) and address. One
    filter per call uses its own index: (action, actor_label, created_at) or (action,
    address, created_at); the sign-in throttle asks once per email and once per address."""
    condition = (AuditEntry.action == action) & (AuditEntry.created_at >= since)
    if email is not None:
        condition &= AuditEntry.actor_label == _label(email)
    if address is not None:
        condition &= AuditEntry.address == address[:ADDRESS_LENGTH]
    return AuditEntry.select().where(condition).count()
