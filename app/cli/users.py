"""flask users: the dashboard's users: create, list, set passwords, disable, enable."""

import sys

import click
from flask.cli import AppGroup

from app.cli.common import CLI, tenant_option, user_errors
from app.services import tenants as tenant_service
from app.services import users as user_service
from app.util import isoformat

users_cli = AppGroup("users", help="Dashboard users: create, list, set passwords, disable.")


def read_password(from_stdin: bool) -> str:
    """The new password: one line on stdin, or asked for twice at the terminal."""
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    return click.prompt("Password", hide_input=True, confirmation_prompt=True)


password_stdin_option = click.option(
    "--password-stdin", is_flag=True, help="Read the password from one line of stdin."
)


@users_cli.command("create")
@tenant_option
@click.option("--email", required=True, help="The user's email; they sign in with it.")
@click.option(
    "--role",
    type=click.Choice(user_service.ROLES),
    default="viewer",
    show_default=True,
    help="owner: everything, users too; admin: all but users; viewer: reads only.",
)
@password_stdin_option
@user_errors
def users_create(tenant_ref: str, email: str, role: str, password_stdin: bool) -> None:
    """Create a dashboard user of a tenant (asks for the password)."""
    tenant = tenant_service.find_tenant(tenant_ref)
    password = read_password(password_stdin)
    user = user_service.create_user(
        tenant=tenant, actor=CLI, email=email, password=password, role=role
    )
    click.echo(f"Created {user.role} {user.email} ({user.id}) of {tenant.name}.")


@users_cli.command("list")
@click.option("--tenant", "tenant_ref", help="Only this tenant's users (id or name).")
@user_errors
def users_list(tenant_ref: str | None) -> None:
    """List dashboard users (never their passwords)."""
    tenant = tenant_service.find_tenant(tenant_ref) if tenant_ref else None
    for user in user_service.list_users(tenant=tenant):
        state = f"disabled {isoformat(user.disabled_at)}" if user.disabled_at else "active"
        signed_in = isoformat(user.last_sign_in_at) or "never"
        click.echo(
            f"{user.id}  {user.email}  {user.role}  tenant {user.tenant_id}"
            f"  last sign-in {signed_in}  {state}"
        )


@users_cli.command("set-password")
@click.option("--email", required=True)
@password_stdin_option
@user_errors
def users_set_password(email: str, password_stdin: bool) -> None:
    """Set a user's password; their other sessions end."""
    user = user_service.find_user(email)
    password = read_password(password_stdin)
    user = user_service.set_password(user=user, actor=CLI, password=password)
    click.echo(f"New password set for {user.email}; their sessions have ended.")


@users_cli.command("disable")
@click.option("--email", required=True)
@user_errors
def users_disable(email: str) -> None:
    """Disable a user: they cannot sign in, and their sessions end."""
    user, changed = user_service.disable(user=user_service.find_user(email), actor=CLI)
    if changed:
        click.echo(f"Disabled {user.email}; their sessions have ended.")
    else:
        click.echo(f"{user.email} was already disabled at {isoformat(user.disabled_at)}.")


@users_cli.command("enable")
@click.option("--email", required=True)
@user_errors
def users_enable(email: str) -> None:
    """Enable a disabled user: they can sign in again, with the password they had."""
    user, changed = user_service.enable(user=user_service.find_user(email), actor=CLI)
    if changed:
        click.echo(f"Enabled {user.email}: they can sign in again.")
    else:
        click.echo(f"{user.email} is not disabled.")
