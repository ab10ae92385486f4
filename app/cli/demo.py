"""flask demo: a demo tenant with a number, an agent, an owner and credit, and a new key."""

import click
from flask import current_app

from app.cli.common import CLI, user_errors
from app.services import demo as demo_service


@click.command("demo")
@user_errors
def demo() -> None:
    """Create (once) a demo tenant, number, agent, owner and 60 minutes; print a new key
    (earlier ones keep working) and a fresh password for the demo owner."""
    made = demo_service.set_up(actor=CLI)
    click.echo(
        f"Demo tenant {made.tenant.id}: number {made.number.display_number} -> agent "
        f"{made.agent.id}"
    )
    click.echo(f"API key (earlier demo keys keep working): {made.key}")
    click.echo(
        f"Dashboard: sign in as {demo_service.OWNER} with the password {made.owner_password}"
    )
    runtime_token = current_app.config.get("RUNTIME_TOKEN")
    if runtime_token:
        click.echo(f"Runtime API token (Authorization: Bearer ...): {runtime_token}")
    else:
        click.echo("Runtime API off: RUNTIME_TOKEN is not set.")
