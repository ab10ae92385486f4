"""Audit log: every change made from the API, the dashboard or the CLI, per tenant, newest
first.

A service that changes something writes the change's one entry itself, in the change's own
transaction, with the actor its caller passes (actor=): an API key, a dashboard user, the CLI.
Details hold what the target record does not (which fields an update changed, the ids it
links, the parameters of an action that leaves no record of its own), never a value typed into
a field and never a secret.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from peewee import Tuple

from app.errors import NotFound
from app.models import AuditEntry, Tenant, User
from app.services.pages import Page, paginate
from app.util import camelcase, new_id


class NamedKey(Protocol):
    """An API key as an actor sees it: its record, or the request's authenticated key."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def prefix(self) -> str: ...


ACTOR_TYPES = ("api_key", "user", "cli", "runtime", "system")
# Detail names that would hold a secret: an entry never stores one (a key is named by its id).
SECRET_DETAILS = frozenset({"key", "apiKey", "password", "secret", "signingSecret", "token"})
LABEL_LENGTH = AuditEntry.actor_label.max_length
ADDRESS_LENGTH = AuditEntry.address.max_length


def _label(text: str) -> str:
    """The label as stored: a sign-in form may send an email of any length."""
    return text[:LABEL_LENGTH]


@dataclass(frozen=True)
class Actor:
    """Who makes a change: services that change something take one as `actor=` and write
    their audit entry with it, in the change's own transaction."""

    type: str
    label: str
    id: str | None = None
    address: str | None = None

    @classmethod
    def cli(cls) -> "Actor":
        return cls(type="cli", label="CLI")

    @classmethod
    def runtime(cls) -> "Actor":
        return cls(type="runtime", label="Runtime")

    @classmethod
    def system(cls) -> "Actor":
        return cls(type="system", label="System")

    @classmethod
    def api_key(cls, key: NamedKey, address: str | None = None) -> "Actor":
        """An API key (its record, or the request's authenticated key), labelled by its name
        and prefix: `production (dkl_AbCd…)`."""
        return cls(type="api_key", label=f"{key.name} ({key.prefix}…)", id=key.id, address=address)

    @classmethod
    def user(cls, user: User, address: str | None = None) -> "Actor":
        return cls(type="user", label=user.email, id=user.id, address=address)


def write(
    actor: Actor,
    *,
    tenant_id: str | None,
    action: str,
    target_id: str | None = None,
    details: dict[str, Any] | None = None,
) -> AuditEntry:
    """Write the entry for a change made by actor; call it inside the change's transaction."""
    return record(
        tenant_id=tenant_id,
        action=action,
        target_id=target_id,
        actor_type=actor.type,
        actor_id=actor.id,
        actor_label=actor.label,
        address=actor.address,
        details=details,
    )


def fields(names: Iterable[str]) -> dict[str, list[str]]:
    """The details of an update: the API's names (camelCase) of the fields it changed."""
    return {"fields": sorted(camelcase(name) for name in names)}


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


@dataclass(frozen=True)
class LogPage:
    """A page of the audit log, newest first, and where the next one starts."""

    entries: list[AuditEntry]
    has_more: bool
    next_after: str | None


def list_log(
    *,
    tenant: Tenant,
    action: str | None = None,
    actor_type: str | None = None,
    since: datetime | None = None,
    after: str | None = None,
    limit: int = 50,
) -> LogPage:
    """The tenant's entries older than the entry `after` (from the newest without it), newest
    first (ties by id), filtered by action, actor type and since: keyset paging on
    (created_at, id), a range of the (tenant, created_at, id) index, or of (tenant, action,
    created_at, id) with an action, as cheap deep in the log as at its top. An unknown `after`
    is NotFound."""
    condition = AuditEntry.tenant == tenant
    if after is not None:
        cursor = (
            AuditEntry.select(AuditEntry.created_at, AuditEntry.id)
            .where((AuditEntry.id == after) & (AuditEntry.tenant == tenant))
            .first()
        )
        if cursor is None:
            raise NotFound(
                f"No audit log entry {after} (after): it is not one of yours. Start again "
                "without after.",
                details={"after": after},
            )
        condition &= Tuple(AuditEntry.created_at, AuditEntry.id) < Tuple(
            cursor.created_at, cursor.id
        )
    if action is not None:
        condition &= AuditEntry.action == action
    if actor_type is not None:
        condition &= AuditEntry.actor_type == actor_type
    if since is not None:
        condition &= AuditEntry.created_at >= since
    rows = list(
        AuditEntry.select()
        .where(condition)
        .order_by(AuditEntry.created_at.desc(), AuditEntry.id.desc())
        .limit(limit + 1)
    )
    shown = rows[:limit]
    return LogPage(
        entries=shown, has_more=len(rows) > limit, next_after=shown[-1].id if shown else after
    )


def list_entries(
    *,
    tenant: Tenant,
    limit: int,
    offset: int,
    action: str | None = None,
    actor_type: str | None = None,
    since: datetime | None = None,
) -> Page:
    """One page of the tenant's entries, newest first (index tenant, created_at, id), filtered
    by action, actor type and since as list_log is."""
    condition = AuditEntry.tenant == tenant
    if action is not None:
        condition &= AuditEntry.action == action
    if actor_type is not None:
        condition &= AuditEntry.actor_type == actor_type
    if since is not None:
        condition &= AuditEntry.created_at >= since
    query = (
        AuditEntry.select()
        .where(condition)
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
