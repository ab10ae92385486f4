"""Credits: the ledger of minute movements and the balance that always equals its sum."""

from app.db import database
from app.errors import NotFound, ValidationFailed
from app.models import CreditTransaction, Tenant
from app.services import events
from app.services.pages import Page, paginate
from app.util import new_id

TRANSACTION_TYPES = ("purchase", "usage", "adjustment", "refund")


def _move(
    *,
    tenant_id: str,
    type: str,
    minutes: int,
    description: str = "",
    call_id: str | None = None,
    idempotency_key: str | None = None,
) -> tuple[CreditTransaction, int]:
    """Move minutes and write the ledger entry; the entry and the tenant's low-balance
    threshold. Call inside a transaction.

    The UPDATE takes the tenant row's write lock first (PostgreSQL row lock, SQLite's
    IMMEDIATE transaction) and returns the balance it wrote, so concurrent movements
    serialise and balanceAfter is exact.
    """
    purchased = minutes if type == "purchase" else 0
    used = -minutes if type == "usage" else 0
    moved = (
        Tenant.update(
            balance_minutes=Tenant.balance_minutes + minutes,
            lifetime_purchased_minutes=Tenant.lifetime_purchased_minutes + purchased,
            lifetime_used_minutes=Tenant.lifetime_used_minutes + used,
        )
        .where(Tenant.id == tenant_id)
        .returning(Tenant.balance_minutes, Tenant.low_balance_threshold)
        .tuples()
        .execute()
    )
    row = next(iter(moved), None)
    if row is None:
        raise NotFound(f"Tenant {tenant_id} not found.")
    balance, threshold = row
    entry = CreditTransaction.create(
        id=new_id("ctx"),
        tenant=tenant_id,
        type=type,
        minutes=minutes,
        balance_after=balance,
        call=call_id,
        description=description,
        idempotency_key=idempotency_key,
    )
    return entry, threshold


def grant(*, tenant: Tenant, minutes: int, note: str = "") -> CreditTransaction:
    """Add purchased minutes (a purchase ledger entry)."""
    if minutes < 1:
        raise ValidationFailed("Grant at least 1 minute.")
    with database.atomic():
        entry, _ = _move(
            tenant_id=tenant.id,
            type="purchase",
            minutes=minutes,
            description=note or f"Purchased {minutes} minutes",
        )
    return entry


def usage_minutes(talk_time_seconds: int) -> int:
    """Minutes charged for a call: every started minute of talk time."""
    return -(-talk_time_seconds // 60)


def charge_call(*, tenant_id: str, call_id: str, minutes: int) -> CreditTransaction | None:
    """Charge a call's minutes once; call inside the transaction that ends the call.

    A zero-minute call writes no ledger entry. A charge that moves the balance from at or
    above the tenant's threshold to below it emits credits.low (once per crossing).
    """
    if minutes <= 0:
        return None
    entry, threshold = _move(
        tenant_id=tenant_id,
        type="usage",
        minutes=-minutes,
        description=f"Call {call_id}: {minutes} minute{'s' if minutes != 1 else ''}",
        call_id=call_id,
        idempotency_key=f"usage:{call_id}",
    )
    if entry.balance_after + minutes >= threshold > entry.balance_after:
        events.emit(
            tenant_id=tenant_id,
            type="credits.low",
            data={"balanceMinutes": entry.balance_after, "threshold": threshold},
            occurred_at=entry.created_at,
        )
    return entry


def get_balance(*, tenant: Tenant) -> Tenant:
    """The tenant row as stored now: balance, lifetime counters and threshold."""
    return Tenant.get_by_id(tenant.id)


def list_transactions(*, tenant: Tenant, limit: int, offset: int, type: str | None = None) -> Page:
    """The tenant's ledger, newest first; total is bounded (see app.services.pages)."""
    query = CreditTransaction.select().where(CreditTransaction.tenant == tenant)
    if type is not None:
        query = query.where(CreditTransaction.type == type)
    query = query.order_by(CreditTransaction.created_at.desc(), CreditTransaction.id.desc())
    return paginate(query, limit=limit, offset=offset)
