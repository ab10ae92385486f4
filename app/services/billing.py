"""Credits: the ledger of minute movements and the balance that always equals its sum."""

from app.db import database
from app.errors import ValidationFailed
from app.models import CreditTransaction, Tenant
from app.util import new_id


def _apply(
    *,
    tenant_id: str,
    type: str,
    minutes: int,
    description: str = "",
    call_id: str | None = None,
    idempotency_key: str | None = None,
) -> CreditTransaction:
    """Move minutes and write the ledger entry; call inside a transaction.

    The UPDATE takes the tenant row's write lock first (PostgreSQL row lock, SQLite's
    IMMEDIATE transaction), so concurrent movements serialise and balanceAfter is exact.
    """
    purchased = minutes if type == "purchase" else 0
    used = -minutes if type == "usage" else 0
    Tenant.update(
        balance_minutes=Tenant.balance_minutes + minutes,
        lifetime_purchased_minutes=Tenant.lifetime_purchased_minutes + purchased,
        lifetime_used_minutes=Tenant.lifetime_used_minutes + used,
    ).where(Tenant.id == tenant_id).execute()
    balance = Tenant.select(Tenant.balance_minutes).where(Tenant.id == tenant_id).scalar()
    return CreditTransaction.create(
        id=new_id("ctx"),
        tenant=tenant_id,
        type=type,
        minutes=minutes,
        balance_after=balance,
        call=call_id,
        description=description,
        idempotency_key=idempotency_key,
    )


def grant(*, tenant: Tenant, minutes: int, note: str = "") -> CreditTransaction:
    """Add purchased minutes (a purchase ledger entry)."""
    if minutes < 1:
        raise ValidationFailed("Grant at least 1 minute.")
    with database.atomic():
        entry = _apply(
            tenant_id=tenant.id,
            type="purchase",
            minutes=minutes,
            description=note or f"Purchased {minutes} minutes",
        )
    return entry
