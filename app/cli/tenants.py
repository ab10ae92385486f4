"""flask tenants: create tenants, list them, change their plan and low-balance threshold."""

import click
from flask.cli import AppGroup

from app.cli.common import CLI, tenant_option, user_errors
from app.models import Tenant
from app.resources.fields import MAX_INT32
from app.services import tenants as tenant_service

tenants_cli = AppGroup("tenants", help="Create and manage tenants.")

rate_limit_option = click.option(
    "--rate-limit",
    type=click.IntRange(max=MAX_INT32),
    help="Requests per minute (required for enterprise; default: the plan's).",
)
concurrent_calls_option = click.option(
    "--concurrent-calls",
    type=click.IntRange(max=MAX_INT32),
    help="Calls in progress at once (required for enterprise; default: the plan's, starter "
    f"{tenant_service.PLAN_CONCURRENT_CALLS['starter']}, business "
    f"{tenant_service.PLAN_CONCURRENT_CALLS['business']}).",
)


def plan_summary(tenant: Tenant) -> str:
    return (
        f"{tenant.plan}, {tenant_service.rate_limit_of(tenant)}/min, "
        f"{tenant_service.concurrent_call_limit_of(tenant)} calls at once"
    )


@tenants_cli.command("create")
@click.argument("name")
@click.option(
    "--plan",
    type=click.Choice(list(tenant_service.PLAN_LIMITS)),
    default="starter",
    show_default=True,
)
@rate_limit_option
@concurrent_calls_option
@user_errors
def tenants_create(
    name: str, plan: str, rate_limit: int | None, concurrent_calls: int | None
) -> None:
    """Create a tenant."""
    tenant = tenant_service.create_tenant(
        actor=CLI, name=name, plan=plan, rate_limit=rate_limit, concurrent_calls=concurrent_calls
    )
    click.echo(f"Created tenant {tenant.id} ({tenant.name}, {plan_summary(tenant)}).")


@tenants_cli.command("list")
@user_errors
def tenants_list() -> None:
    """List tenants."""
    for tenant in tenant_service.list_tenants():
        limit = tenant_service.rate_limit_of(tenant)
        calls = tenant_service.concurrent_call_limit_of(tenant)
        click.echo(
            f"{tenant.id}  {tenant.name}  plan={tenant.plan}  rate={limit}/min  "
            f"calls={tenant.active_calls}/{calls}  "
            f"balance={tenant.balance_minutes}min  threshold={tenant.low_balance_threshold}min"
        )


@tenants_cli.command("set-plan")
@tenant_option
@click.argument("plan", type=click.Choice(list(tenant_service.PLAN_LIMITS)))
@rate_limit_option
@concurrent_calls_option
@user_errors
def tenants_set_plan(
    tenant_ref: str, plan: str, rate_limit: int | None, concurrent_calls: int | None
) -> None:
    """Change a tenant's plan and limits (a limit left out is the plan's); the rate limit
    holds from the next request, the concurrent-call limit from the next call's start."""
    tenant = tenant_service.set_plan(
        tenant=tenant_service.find_tenant(tenant_ref),
        actor=CLI,
        plan=plan,
        rate_limit=rate_limit,
        concurrent_calls=concurrent_calls,
    )
    click.echo(f"{tenant.name} is on {plan_summary(tenant)}.")


@tenants_cli.command("set-threshold")
@tenant_option
@click.argument("minutes", type=click.IntRange(max=MAX_INT32))
@user_errors
def tenants_set_threshold(tenant_ref: str, minutes: int) -> None:
    """Set the balance (minutes) below which credits.low fires."""
    tenant = tenant_service.set_threshold(
        tenant=tenant_service.find_tenant(tenant_ref), actor=CLI, minutes=minutes
    )
    click.echo(f"{tenant.name}: credits.low fires below {minutes} minutes.")
