"""flask keys: create an API key (printed once), list a tenant's keys, revoke one."""

import re
from typing import Any

import click
from flask.cli import AppGroup

from app.cli.common import CLI, tenant_option, user_errors
from app.services import keys as key_service
from app.services import tenants as tenant_service
from app.util import isoformat, utcnow

keys_cli = AppGroup("keys", help="Create, list and revoke API keys.")


class Days(click.ParamType):
    """A number of days written Nd, e.g. 90d."""

    name = "Nd"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        match = re.fullmatch(r"([0-9]{1,6})d", str(value).strip())
        days = int(match.group(1)) if match else 0
        if not 1 <= days <= key_service.MAX_EXPIRY_DAYS:
            self.fail(
                f"{value!r} is not a number of days from 1d to {key_service.MAX_EXPIRY_DAYS}d, "
                "such as 90d.",
                param,
                ctx,
            )
        return days


@keys_cli.command("create")
@tenant_option
@click.option("--name", required=True, help="What the key is for, e.g. production.")
@click.option(
    "--scope",
    type=click.Choice(key_service.SCOPES),
    default="full",
    show_default=True,
    help="full, or read: the key may only read (GET).",
)
@click.option(
    "--expires-in",
    "expires_in_days",
    type=Days(),
    default=None,
    help="Days until the key stops working, e.g. 90d (default: never).",
)
@user_errors
def keys_create(tenant_ref: str, name: str, scope: str, expires_in_days: int | None) -> None:
    """Create an API key and print it once."""
    tenant = tenant_service.find_tenant(tenant_ref)
    record, key = key_service.create_key(
        tenant=tenant, actor=CLI, name=name, scope=scope, expires_in_days=expires_in_days
    )
    expiry = f"expires {isoformat(record.expires_at)}" if record.expires_at else "never expires"
    click.echo(
        f"Created key {record.id} ({name}, {scope}, {expiry}) for {tenant.name}. "
        "It is shown only once:"
    )
    click.echo(key)


@keys_cli.command("list")
@tenant_option
@user_errors
def keys_list(tenant_ref: str) -> None:
    """List a tenant's keys (never the keys themselves)."""
    tenant = tenant_service.find_tenant(tenant_ref)
    now = utcnow()
    for record in key_service.list_keys(tenant=tenant):
        state = key_service.state(record, now)
        if state == "revoked":
            state = f"revoked {isoformat(record.revoked_at)}"
        click.echo(
            f"{record.id}  {record.name}  {record.prefix}…  scope={record.scope}"
            f"  created {isoformat(record.created_at)}"
            f"  expires {isoformat(record.expires_at) or 'never'}"
            f"  last used {isoformat(record.last_used_at) or 'never'}  {state}"
        )


@keys_cli.command("revoke")
@click.argument("key_id")
@user_errors
def keys_revoke(key_id: str) -> None:
    """Revoke a key; effective on the next request."""
    record, revoked = key_service.revoke_key(key_id=key_id, actor=CLI)
    if revoked:
        click.echo(f"Revoked {record.id} ({record.name}).")
    else:
        click.echo(
            f"{record.id} ({record.name}) was already revoked at "
            f"{isoformat(record.revoked_at)}; nothing changed."
        )
