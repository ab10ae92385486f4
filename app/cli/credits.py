"""flask credits: grant a tenant purchased minutes."""

import click
from flask.cli import AppGroup

from app.cli.common import CLI, tenant_option, user_errors
from app.resources.fields import MAX_INT32
from app.services import billing
from app.services import tenants as tenant_service

credits_cli = AppGroup("credits", help="Grant credit minutes.")


@credits_cli.command("grant")
@tenant_option
@click.option(
    "--minutes", type=click.IntRange(max=MAX_INT32), required=True, help="Minutes to add."
)
@click.option("--note", default="", help="Ledger description.")
@user_errors
def credits_grant(tenant_ref: str, minutes: int, note: str) -> None:
    """Add purchased minutes (a purchase ledger entry)."""
    tenant = tenant_service.find_tenant(tenant_ref)
    entry = billing.grant(tenant=tenant, actor=CLI, minutes=minutes, note=note)
    click.echo(f"Granted {minutes} minutes to {tenant.name}; balance {entry.balance_after}.")
