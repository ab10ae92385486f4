"""Tenants: created and managed by admins through the CLI."""

import peewee as pw

from app.db import unit_of_work
from app.errors import Conflict, NotFound, ValidationFailed
from app.models import Tenant
from app.services import audit
from app.services.audit import Actor
from app.util import new_id

STARTER_LIMIT = 60
PLAN_LIMITS = {"starter": STARTER_LIMIT, "business": 300, "enterprise": None}
# Calls in progress at once, per plan; enterprise tenants have their own number.
STARTER_CONCURRENT_CALLS = 5
PLAN_CONCURRENT_CALLS = {"starter": STARTER_CONCURRENT_CALLS, "business": 20, "enterprise": None}


def _check_plan(plan: str, rate_limit: int | None, concurrent_calls: int | None) -> None:
    if plan not in PLAN_LIMITS:
        raise ValidationFailed(f"Unknown plan {plan!r}: use one of {', '.join(PLAN_LIMITS)}.")
    if plan == "enterprise" and rate_limit is None:
        raise ValidationFailed("The enterprise plan needs --rate-limit (requests per minute).")
    if plan == "enterprise" and concurrent_calls is None:
        raise ValidationFailed("The enterprise plan needs --concurrent-calls (calls at once).")
    if rate_limit is not None and rate_limit < 1:
        raise ValidationFailed("The rate limit must be at least 1 request per minute.")
    if concurrent_calls is not None and concurrent_calls < 1:
        raise ValidationFailed("The concurrent-call limit must be at least 1 call.")


def create_tenant(
    *,
    actor: Actor,
    name: str,
    plan: str = "starter",
    rate_limit: int | None = None,
    concurrent_calls: int | None = None,
) -> Tenant:
    """Create a tenant with a unique name; the limits left None are the plan's. Its audit log
    begins with its creation."""
    name = name.strip()
    if not name or len(name) > 100:
        raise ValidationFailed("A tenant name is 1 to 100 characters.")
    _check_plan(plan, rate_limit, concurrent_calls)
    with unit_of_work():
        if Tenant.select().where(Tenant.name == name).exists():
            raise Conflict(f"A tenant named {name!r} already exists.")
        tenant = Tenant.create(
            id=new_id("ten"),
            name=name,
            plan=plan,
            rate_limit=rate_limit,
            concurrent_call_limit=concurrent_calls,
        )
        audit.write(actor, tenant_id=tenant.id, action="tenant.created", target_id=tenant.id)
    return tenant


def list_tenants() -> list[Tenant]:
    return list(Tenant.select().order_by(Tenant.created_at))


def find_tenant(ref: str) -> Tenant:
    """A tenant by id or by its unique name."""
    tenant = Tenant.get_or_none((Tenant.id == ref) | (Tenant.name == ref))
    if tenant is None:
        raise NotFound(f"No tenant with id or name {ref!r}.")
    return tenant


def rate_limit_of(tenant: Tenant) -> int:
    """Requests per minute for the tenant: its own number, else its plan's."""
    return tenant.rate_limit or PLAN_LIMITS.get(tenant.plan) or STARTER_LIMIT


def concurrent_call_limit(*, plan: str, custom: int | None) -> int:
    """Calls a tenant may have in progress at once: its own number, else its plan's."""
    return custom or PLAN_CONCURRENT_CALLS.get(plan) or STARTER_CONCURRENT_CALLS


def concurrent_call_limit_of(tenant: Tenant) -> int:
    return concurrent_call_limit(plan=tenant.plan, custom=tenant.concurrent_call_limit)


def concurrent_call_limit_sql() -> pw.Node:
    """concurrent_call_limit as SQL over the tenant row, for a query that picks the tenants
    with a free slot."""
    plans = [(plan, calls) for plan, calls in PLAN_CONCURRENT_CALLS.items() if calls]
    return pw.fn.COALESCE(
        Tenant.concurrent_call_limit, pw.Case(Tenant.plan, plans, STARTER_CONCURRENT_CALLS)
    )


def set_plan(
    *,
    tenant: Tenant,
    actor: Actor,
    plan: str,
    rate_limit: int | None = None,
    concurrent_calls: int | None = None,
) -> Tenant:
    """Change the plan and its custom limits (None: the plan's); the rate limit holds from the
    next request, the concurrent-call limit from the next call's start (calls in progress go
    on). The audit entry names the fields that changed (none: no entry)."""
    _check_plan(plan, rate_limit, concurrent_calls)
    given = {"plan": plan, "rate_limit": rate_limit, "concurrent_call_limit": concurrent_calls}
    changed = [name for name, value in given.items() if getattr(tenant, name) != value]
    with unit_of_work():
        Tenant.update(**given).where(Tenant.id == tenant.id).execute()
        if changed:
            audit.write(
                actor,
                tenant_id=tenant.id,
                action="tenant.plan_changed",
                target_id=tenant.id,
                details=audit.fields(changed),
            )
    tenant.plan, tenant.rate_limit = plan, rate_limit
    tenant.concurrent_call_limit = concurrent_calls
    return tenant


def set_threshold(*, tenant: Tenant, actor: Actor, minutes: int) -> Tenant:
    """Set the balance below which credits.low fires (the same value again changes nothing)."""
    if minutes < 0:
        raise ValidationFailed("The threshold must be zero or more minutes.")
    if minutes == tenant.low_balance_threshold:
        return tenant
    with unit_of_work():
        Tenant.update(low_balance_threshold=minutes).where(Tenant.id == tenant.id).execute()
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="tenant.threshold_changed",
            target_id=tenant.id,
            details=audit.fields(("low_balance_threshold_minutes",)),
        )
    tenant.low_balance_threshold = minutes
    return tenant
