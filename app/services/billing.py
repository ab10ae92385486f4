"""Credits: the ledger of minute movements and the balance that always equals its sum, and
the minutes open calls hold (prepaid credit control).

A call admitted at its start holds min(its agent's limit, available) minutes, where
available = balance - minutes held by the tenant's other open calls, and one of the tenant's
concurrent-call slots. Both are taken under the tenant row's write lock, so concurrent starts
never hold more than the balance nor more calls than the limit, and both are released
together, once: when the call ends (in the transaction that charges it) or its hold lapses.
"""

from datetime import timedelta
from typing import Any

from app.db import unit_of_work
from app.errors import NotFound, ValidationFailed
from app.models import CreditTransaction, Tenant
from app.services import audit, events
from app.services.audit import Actor
from app.services.pages import Page, paginate
from app.util import new_id

TRANSACTION_TYPES = ("purchase", "usage", "adjustment", "refund")

# A hold outlives its call's allowance by this much (ringing, and a runtime's late report)
# before it lapses on its own: a call the runtime never reports ended frees its minutes then.
HOLD_GRACE = timedelta(minutes=15)


def _move(
    *,
    tenant_id: str,
    type: str,
    minutes: int,
    description: str = "",
    call_id: str | None = None,
    idempotency_key: str | None = None,
    released: int = 0,
) -> tuple[CreditTransaction, int]:
    """Move minutes (and release the hold of released minutes and the slot of the call that
    ends) and write the ledger entry; the entry and the tenant's low-balance threshold. Call
    inside a transaction.

    The UPDATE takes the tenant row's write lock first (PostgreSQL row lock, SQLite's
    IMMEDIATE transaction) and returns the balance it wrote, so concurrent movements
    serialise and balanceAfter is exact.
    """
    purchased = minutes if type == "purchase" else 0
    used = -minutes if type == "usage" else 0
    moved = (
        Tenant.update(
            {
                Tenant.balance_minutes: Tenant.balance_minutes + minutes,
                Tenant.lifetime_purchased_minutes: Tenant.lifetime_purchased_minutes + purchased,
                Tenant.lifetime_used_minutes: Tenant.lifetime_used_minutes + used,
                **(_freeing(minutes=released, calls=1) if released else {}),
            }
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


def grant(*, tenant: Tenant, actor: Actor, minutes: int, note: str = "") -> CreditTransaction:
    """Add purchased minutes (a purchase ledger entry, the audit entry's target)."""
    if minutes < 1:
        raise ValidationFailed("Grant at least 1 minute.")
    with unit_of_work():
        entry, _ = _move(
            tenant_id=tenant.id,
            type="purchase",
            minutes=minutes,
            description=note or f"Purchased {minutes} minutes",
        )
        audit.write(actor, tenant_id=tenant.id, action="credits.granted", target_id=entry.id)
    return entry


def adjust(*, tenant: Tenant, actor: Actor, minutes: int, note: str = "") -> CreditTransaction:
    """Correct the balance by signed minutes (an adjustment ledger entry, the audit entry's
    target); unlike a charge it emits no credits.low."""
    if minutes == 0:
        raise ValidationFailed("Adjust by at least 1 minute, up or down.")
    with unit_of_work():
        entry, _ = _move(
            tenant_id=tenant.id,
            type="adjustment",
            minutes=minutes,
            description=note or f"Adjusted by {minutes:+d} minutes",
        )
        audit.write(actor, tenant_id=tenant.id, action="credits.adjusted", target_id=entry.id)
    return entry


def usage_minutes(talk_time_seconds: int) -> int:
    """Minutes charged for a call: every started minute of talk time."""
    return -(-talk_time_seconds // 60)


def hold(*, balance: int, reserved: int, wanted: int) -> int:
    """The minutes a new call may hold: its agent's limit, at most what is available."""
    return max(0, min(wanted, balance - reserved))


def admit(*, tenant_id: str, minutes: int) -> None:
    """Take a new call's hold of minutes and one concurrent-call slot; call inside the
    transaction that read the balance, the holds and the calls in progress under the tenant
    row's lock (see hold), with a hold of at least a minute."""
    Tenant.update(
        {
            Tenant.reserved_minutes: Tenant.reserved_minutes + minutes,
            Tenant.active_calls: Tenant.active_calls + 1,
        }
    ).where(Tenant.id == tenant_id).execute()


def _freeing(*, minutes: int, calls: int) -> dict[Any, Any]:
    """The SET of a tenant-row UPDATE that frees calls' holds (minutes in all) and their
    slots: what every path by which a call stops counting (its end, its lapsed hold) writes."""
    return {
        Tenant.reserved_minutes: Tenant.reserved_minutes - minutes,
        Tenant.active_calls: Tenant.active_calls - calls,
    }


def release_holds(holds: dict[str, list[int]]) -> None:
    """Free calls' holds and their slots: per tenant id, the minutes each call held (at least
    one: a call admitted holds a minute or more). Call inside the transaction whose
    conditional UPDATE of the calls made it the one that releases them.

    Tenants in id order, so two processes releasing at once take their row locks in one order.
    """
    for tenant_id, held in sorted(holds.items()):
        Tenant.update(_freeing(minutes=sum(held), calls=len(held))).where(
            Tenant.id == tenant_id
        ).execute()


def charge_call(
    *, tenant_id: str, call_id: str, minutes: int, held: int = 0
) -> CreditTransaction | None:
    """Charge a call's minutes once and release its hold of held minutes and its slot (held
    is 0 once the hold lapsed: both were released then); call inside the transaction that
    ends the call.

    A zero-minute call writes no ledger entry. A charge that moves the balance from at or
    above the tenant's threshold to below it emits credits.low (once per crossing).
    """
    if minutes <= 0:
        if held:
            release_holds({tenant_id: [held]})
        return None
    entry, threshold = _move(
        tenant_id=tenant_id,
        type="usage",
        minutes=-minutes,
        description=f"Call {call_id}: {minutes} minute{'s' if minutes != 1 else ''}",
        call_id=call_id,
        idempotency_key=f"usage:{call_id}",
        released=held,
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
