"""Tenants: created and managed by admins through the CLI."""

from app.db import database
from app.errors import Conflict, NotFound, ValidationFailed
from app.models import Tenant
from app.util import new_id

STARTER_LIMIT = 60
PLAN_LIMITS = {"starter": STARTER_LIMIT, "business": 300, "enterprise": None}


def _check_plan(plan: str, rate_limit: int | None) -> None:
    if plan not in PLAN_LIMITS:
        raise ValidationFailed(f"Unknown plan {plan!r}: use one of {', '.join(PLAN_LIMITS)}.")
    if plan == "enterprise" and rate_limit is None:
        raise ValidationFailed("The enterprise plan needs --rate-limit (requests per minute).")
    if rate_limit is not None and rate_limit < 1:
        raise ValidationFailed("The rate limit must be at least 1 request per minute.")


def create_tenant(*, name: str, plan: str = "starter", rate_limit: int | None = None) -> Tenant:
    """Create a tenant with a unique name."""
    name = name.strip()
    if not name or len(name) > 100:
        raise ValidationFailed("A tenant name is 1 to 100 characters.")
    _check_plan(plan, rate_limit)
    with database.atomic():
        if Tenant.select().where(Tenant.name == name).exists():
            raise Conflict(f"A tenant named {name!r} already exists.")
        return Tenant.create(id=new_id("ten"), name=name, plan=plan, rate_limit=rate_limit)


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


def set_plan(*, tenant: Tenant, plan: str, rate_limit: int | None = None) -> Tenant:
    """Change the plan (and the custom limit); takes effect on the next request."""
    _check_plan(plan, rate_limit)
    with database.atomic():
        Tenant.update(plan=plan, rate_limit=rate_limit).where(Tenant.id == tenant.id).execute()
    tenant.plan, tenant.rate_limit = plan, rate_limit
    return tenant


def set_threshold(*, tenant: Tenant, minutes: int) -> Tenant:
    """Set the balance below which credits.low fires."""
    if minutes < 0:
        raise ValidationFailed("The threshold must be zero or more minutes.")
    with database.atomic():
        Tenant.update(low_balance_threshold=minutes).where(Tenant.id == tenant.id).execute()
    tenant.low_balance_threshold = minutes
    return tenant
