"""Agents: a tenant's AI voice agents. Deleting is soft; past calls keep their agentId."""

from typing import Any

from app.db import unit_of_work
from app.errors import NotFound
from app.models import Agent, Function, PhoneNumber, Tenant
from app.services import audit, limits
from app.services.audit import Actor
from app.util import new_id, utcnow


def list_agents(*, tenant: Tenant) -> list[Agent]:
    """The tenant's live agents, oldest first."""
    query = Agent.select().where((Agent.tenant == tenant) & Agent.deleted_at.is_null())
    return list(query.order_by(Agent.created_at, Agent.id))


def get_agent(*, tenant: Tenant, agent_id: str) -> Agent:
    """The tenant's live agent, or NotFound (also for another tenant's or a deleted agent)."""
    agent = Agent.get_or_none(
        (Agent.id == agent_id) & (Agent.tenant == tenant) & Agent.deleted_at.is_null()
    )
    if agent is None:
        raise NotFound(f"Agent {agent_id} not found.")
    return agent


def create_agent(*, tenant: Tenant, actor: Actor, **fields: Any) -> Agent:
    with unit_of_work():
        limits.check(tenant.id, "agents")
        agent = Agent.create(id=new_id("agent"), tenant=tenant, **fields)
        audit.write(actor, tenant_id=tenant.id, action="agent.created", target_id=agent.id)
    return agent


def update_agent(*, tenant: Tenant, actor: Actor, agent_id: str, **fields: Any) -> Agent:
    """Change any writable fields; the audit entry names those whose value changed (none: no
    entry)."""
    with unit_of_work():
        agent = get_agent(tenant=tenant, agent_id=agent_id)
        changed = [name for name, value in fields.items() if getattr(agent, name) != value]
        for name, value in fields.items():
            setattr(agent, name, value)
        agent.updated_at = utcnow()
        agent.save()
        if changed:
            audit.write(
                actor,
                tenant_id=tenant.id,
                action="agent.updated",
                target_id=agent.id,
                details=audit.fields(changed),
            )
    return agent


def delete_agent(*, tenant: Tenant, actor: Actor, agent_id: str) -> None:
    """Soft-delete: unassign its numbers and remove its functions in the same transaction."""
    with unit_of_work():
        agent = get_agent(tenant=tenant, agent_id=agent_id)
        now = utcnow()
        PhoneNumber.update(agent=None, updated_at=now).where(PhoneNumber.agent == agent).execute()
        Function.delete().where(Function.agent == agent).execute()
        agent.deleted_at = agent.updated_at = now
        agent.is_active = False
        agent.save()
        audit.write(actor, tenant_id=tenant.id, action="agent.deleted", target_id=agent.id)
