"""Phone numbers: provisioned by admins, listed and assigned to agents by tenants."""

import re

from app.db import unit_of_work
from app.errors import Conflict, NotFound, ValidationFailed
from app.models import Agent, PhoneNumber, Tenant
from app.services import agents as agent_service
from app.services import audit
from app.services import versions as version_service
from app.services.audit import Actor
from app.util import new_id, utcnow

E164 = re.compile(r"^\+[1-9]\d{6,14}$")
# phone: added by an admin (flask numbers add), for a telephony provider; whatsapp: imported
# from a tenant's WhatsApp Business account (app.services.whatsapp.accounts).
CHANNELS = ("phone", "whatsapp")


def list_numbers(*, tenant: Tenant | None = None, channel: str | None = None) -> list[PhoneNumber]:
    query = PhoneNumber.select().order_by(PhoneNumber.created_at, PhoneNumber.id)
    if tenant is not None:
        query = query.where(PhoneNumber.tenant == tenant)
    if channel is not None:
        query = query.where(PhoneNumber.channel == channel)
    return list(query)


def get_number(*, tenant: Tenant, number_id: str) -> PhoneNumber:
    number = PhoneNumber.get_or_none((PhoneNumber.id == number_id) & (PhoneNumber.tenant == tenant))
    if number is None:
        raise NotFound(f"Phone number {number_id} not found.")
    return number


def add_number(
    *, tenant: Tenant, actor: Actor, display_number: str, label: str = ""
) -> PhoneNumber:
    """Provision a number (E.164) for a tenant; a number belongs to one tenant only."""
    if not E164.match(display_number):
        raise ValidationFailed(
            f"{display_number!r} is not an international number such as +6221555010."
        )
    with unit_of_work():
        if PhoneNumber.select().where(PhoneNumber.display_number == display_number).exists():
            raise Conflict(f"{display_number} is already provisioned.")
        number = PhoneNumber.create(
            id=new_id("pn"), tenant=tenant, display_number=display_number, label=label
        )
        audit.write(actor, tenant_id=tenant.id, action="number.added", target_id=number.id)
    return number


def assign_agent(
    *,
    tenant: Tenant,
    actor: Actor,
    number_id: str,
    agent_id: str | None,
    agent_version: int | None = None,
) -> PhoneNumber:
    """Point a number at one of the tenant's agents, or unassign it with None. With
    agent_version its calls are answered with that version of the agent (pinned), without it
    with the agent's latest version at each call. The audit entry names the agent (null:
    unassigned) and the pinned version, so the log tells which agent answered when."""
    if agent_version is not None and agent_id is None:
        raise ValidationFailed(
            "Invalid value for agentVersion.",
            details={"agentVersion": ["A number without an agent is pinned to no version."]},
        )
    with unit_of_work():
        number = get_number(tenant=tenant, number_id=number_id)
        agent: Agent | None = None
        if agent_id is not None:
            agent = agent_service.get_agent(tenant=tenant, agent_id=agent_id)
            if agent_version is not None:
                version_service.check_pin(agent=agent, version=agent_version)
        number.agent = agent
        number.agent_version = agent_version
        number.updated_at = utcnow()
        number.save()
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="number.assigned",
            target_id=number.id,
            details={"agentId": agent_id}
            if agent_version is None
            else {"agentId": agent_id, "agentVersion": agent_version},
        )
    return number
