"""flask numbers: provision a tenant's phone numbers and list them."""

import click
from flask.cli import AppGroup

from app.cli.common import CLI, tenant_option, user_errors
from app.services import phone_numbers as number_service
from app.services import tenants as tenant_service

numbers_cli = AppGroup("numbers", help="Provision phone numbers.")


@numbers_cli.command("add")
@tenant_option
@click.argument("number")
@click.option("--label", default="", help="Free-text label.")
@user_errors
def numbers_add(tenant_ref: str, number: str, label: str) -> None:
    """Provision a phone number (E.164, e.g. +6221555010) for a tenant."""
    tenant = tenant_service.find_tenant(tenant_ref)
    record = number_service.add_number(tenant=tenant, actor=CLI, display_number=number, label=label)
    click.echo(f"Added {record.id} {record.display_number} for {tenant.name}.")


@numbers_cli.command("list")
@click.option("--tenant", "tenant_ref", help="Only this tenant's numbers (id or name).")
@user_errors
def numbers_list(tenant_ref: str | None) -> None:
    """List phone numbers."""
    tenant = tenant_service.find_tenant(tenant_ref) if tenant_ref else None
    for record in number_service.list_numbers(tenant=tenant):
        click.echo(
            f"{record.id}  {record.display_number}  tenant={record.tenant_id}  "
            f"agent={record.agent_id or '-'}  {record.label}"
        )
