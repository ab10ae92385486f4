"""The demo tenant (flask demo): a number, an agent, an owner and 60 minutes, set up once;
a new API key and a new owner password each time."""

import secrets
from dataclasses import dataclass

from app import db
from app.errors import AppError
from app.models import Agent, PhoneNumber, Tenant
from app.services import agents as agent_service
from app.services import billing
from app.services import keys as key_service
from app.services import phone_numbers as number_service
from app.services import tenants as tenant_service
from app.services import users as user_service
from app.services.audit import Actor

TENANT = "demo"
NUMBER = "+6221555010"
OWNER = "owner@demo.test"


@dataclass(frozen=True)
class Demo:
    """The demo tenant, its number and the number's agent, a new key and the owner's password."""

    tenant: Tenant
    number: PhoneNumber
    agent: Agent
    key: str
    owner_password: str


def new_owner_password(*, tenant: Tenant, actor: Actor) -> str:
    """A new password for the demo tenant's owner (created the first time); the password."""
    password = secrets.token_urlsafe(12)
    try:
        owner = user_service.find_user(OWNER)
    except AppError:
        user_service.create_user(
            tenant=tenant, actor=actor, email=OWNER, password=password, role="owner"
        )
    else:
        user_service.set_password(user=owner, actor=actor, password=password)
    return password


def set_up(*, actor: Actor) -> Demo:
    """Migrate the schema, create what the demo lacks, and make a new key and owner password."""
    db.upgrade()
    try:
        tenant = tenant_service.find_tenant(TENANT)
    except AppError:
        tenant = tenant_service.create_tenant(actor=actor, name=TENANT, plan="business")
        billing.grant(tenant=tenant, actor=actor, minutes=60, note="Demo credit")
    agents = agent_service.list_agents(tenant=tenant)
    if agents:
        agent = agents[0]
    else:
        agent = agent_service.create_agent(
            tenant=tenant,
            actor=actor,
            name="Demo receptionist",
            system_prompt="You are the friendly receptionist of a small clinic. Answer briefly.",
            greeting_text="Halo, terima kasih sudah menelepon. Ada yang bisa saya bantu?",
        )
    numbers = number_service.list_numbers(tenant=tenant)
    number = (
        numbers[0]
        if numbers
        else number_service.add_number(
            tenant=tenant, actor=actor, display_number=NUMBER, label="Demo line"
        )
    )
    if number.agent_id is None:
        number = number_service.assign_agent(
            tenant=tenant, actor=actor, number_id=number.id, agent_id=agent.id
        )
    # A new key each run; the earlier ones stay valid, as a key in use by a running shell or
    # script must not stop working because the demo was set up again.
    _, key = key_service.create_key(tenant=tenant, actor=actor, name="demo")
    password = new_owner_password(tenant=tenant, actor=actor)
    return Demo(tenant=tenant, number=number, agent=agent, key=key, owner_password=password)
