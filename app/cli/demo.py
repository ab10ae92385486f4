"""flask demo: a demo tenant with a number, an agent, an owner and credit, and a new key."""

import secrets
from typing import Any

import click
from flask import current_app

from app import db
from app.cli.common import CLI, user_errors
from app.errors import AppError
from app.services import agents as agent_service
from app.services import billing
from app.services import keys as key_service
from app.services import phone_numbers as number_service
from app.services import tenants as tenant_service
from app.services import users as user_service

DEMO_TENANT = "demo"
DEMO_NUMBER = "+6221555010"
DEMO_OWNER = "owner@demo.test"


def demo_owner_password(tenant: Any) -> str:
    """A new password for the demo tenant's owner (created the first time); the password."""
    password = secrets.token_urlsafe(12)
    try:
        owner = user_service.find_user(DEMO_OWNER)
    except AppError:
        user_service.create_user(
            tenant=tenant, actor=CLI, email=DEMO_OWNER, password=password, role="owner"
        )
    else:
        user_service.set_password(user=owner, actor=CLI, password=password)
    return password


@click.command("demo")
@user_errors
def demo() -> None:
    """Create (once) a demo tenant, number, agent, owner and 60 minutes; print a new key
    (earlier ones keep working) and a fresh password for the demo owner."""
    db.upgrade()
    try:
        tenant = tenant_service.find_tenant(DEMO_TENANT)
    except AppError:
        tenant = tenant_service.create_tenant(actor=CLI, name=DEMO_TENANT, plan="business")
        billing.grant(tenant=tenant, actor=CLI, minutes=60, note="Demo credit")
    agents = agent_service.list_agents(tenant=tenant)
    if agents:
        agent = agents[0]
    else:
        agent = agent_service.create_agent(
            tenant=tenant,
            actor=CLI,
            name="Demo receptionist",
            system_prompt="You are the friendly receptionist of a small clinic. Answer briefly.",
            greeting_text="Halo, terima kasih sudah menelepon. Ada yang bisa saya bantu?",
        )
    numbers = number_service.list_numbers(tenant=tenant)
    number = (
        numbers[0]
        if numbers
        else number_service.add_number(
            tenant=tenant, actor=CLI, display_number=DEMO_NUMBER, label="Demo line"
        )
    )
    if number.agent_id is None:
        number = number_service.assign_agent(
            tenant=tenant, actor=CLI, number_id=number.id, agent_id=agent.id
        )
    # A new key each run; the earlier ones stay valid, as a key in use by a running shell or
    # script must not stop working because the demo was set up again.
    _, key = key_service.create_key(tenant=tenant, actor=CLI, name="demo")
    password = demo_owner_password(tenant)
    click.echo(f"Demo tenant {tenant.id}: number {number.display_number} -> agent {agent.id}")
    click.echo(f"API key (earlier demo keys keep working): {key}")
    click.echo(f"Dashboard: sign in as {DEMO_OWNER} with the password {password}")
    runtime_token = current_app.config.get("RUNTIME_TOKEN")
    if runtime_token:
        click.echo(f"Runtime API token (Authorization: Bearer ...): {runtime_token}")
    else:
        click.echo("Runtime API off: RUNTIME_TOKEN is not set.")
