"""flask whatsapp: link a tenant's WhatsApp Business account, import its numbers again, list
the accounts. The access token and the app secret are read from the environment or asked
for without echo, never taken as arguments (which shell histories and process lists keep)."""

import os

import click
from flask.cli import AppGroup

from app.cli.common import CLI, tenant_option, user_errors
from app.services import tenants as tenant_service
from app.services.whatsapp import accounts as account_service
from app.services.whatsapp.accounts import Imported
from app.util import isoformat

whatsapp_cli = AppGroup("whatsapp", help="WhatsApp Business accounts and their numbers.")

TOKEN_VARIABLE = "WHATSAPP_ACCESS_TOKEN"
APP_SECRET_VARIABLE = "WHATSAPP_APP_SECRET"


def read_secret(variable: str, prompt: str) -> str:
    """The secret from its environment variable, or asked for at the terminal (not echoed)."""
    value = os.environ.get(variable, "").strip()
    if value:
        return value
    return click.prompt(prompt, hide_input=True).strip()


def report(imported: Imported, verb: str) -> None:
    account = imported.account
    click.echo(
        f"{verb} {account.id} (WABA {account.waba_id}, token …{account.token_hint}): "
        f"{imported.added} added, {imported.updated} updated, "
        f"{imported.deactivated} deactivated, {len(imported.skipped)} skipped."
    )
    for skipped in imported.skipped:
        click.echo(f"  skipped {skipped['display_number']}: {skipped['reason']}")


@whatsapp_cli.command("link")
@tenant_option
@click.option("--waba-id", required=True, help="The WhatsApp Business account id (digits).")
@click.option("--label", default="", help="Free-text label.")
@user_errors
def whatsapp_link(tenant_ref: str, waba_id: str, label: str) -> None:
    """Link a WhatsApp Business account to a tenant and import its numbers.

    The access token is read from WHATSAPP_ACCESS_TOKEN and the app secret from
    WHATSAPP_APP_SECRET, or asked for (without echo) when they are unset.
    """
    tenant = tenant_service.find_tenant(tenant_ref)
    if not waba_id.isdigit():
        raise click.BadParameter("the account's numeric id from Meta.", param_hint="--waba-id")
    token = read_secret(TOKEN_VARIABLE, "Access token")
    app_secret = read_secret(APP_SECRET_VARIABLE, "App secret")
    for name, value in (("access token", token), ("app secret", app_secret)):
        if not (8 <= len(value) and value.isascii() and value.isprintable() and " " not in value):
            raise click.ClickException(
                f"The {name} must be at least 8 printable ASCII characters without spaces."
            )
    imported = account_service.link(
        tenant=tenant,
        actor=CLI,
        waba_id=waba_id,
        access_token=token,
        app_secret=app_secret,
        label=label,
    )
    report(imported, f"Linked for {tenant.name}:")


@whatsapp_cli.command("sync")
@click.argument("account_id")
@user_errors
def whatsapp_sync(account_id: str) -> None:
    """Import an account's numbers from Meta again (ACCOUNT_ID: waa_…)."""
    account = account_service.find_account(account_id)
    imported = account_service.sync(tenant=account.tenant, actor=CLI, account_id=account.id)
    report(imported, "Synced")


@whatsapp_cli.command("list")
@click.option("--tenant", "tenant_ref", help="Only this tenant's accounts (id or name).")
@user_errors
def whatsapp_list(tenant_ref: str | None) -> None:
    """List linked accounts with their numbers (never their secrets)."""
    tenant = tenant_service.find_tenant(tenant_ref) if tenant_ref else None
    for account in account_service.list_accounts(tenant=tenant):
        synced = isoformat(account.last_synced_at) if account.last_synced_at else "-"
        click.echo(
            f"{account.id}  waba={account.waba_id}  tenant={account.tenant_id}  "
            f"token=…{account.token_hint}  {account.status}  synced={synced}  {account.label}"
        )
        for number in account_service.numbers_of(account):
            state = "active" if number.is_active else "inactive"
            click.echo(
                f"  {number.id}  {number.display_number}  {state}  "
                f"quality={number.quality_rating or '-'}  {number.label}"
            )
