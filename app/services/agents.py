"""Agents: a tenant's AI voice agents. Deleting is soft; past calls keep their agentId.

A change to what a call uses of an agent makes its next version (app.services.snapshots).
"""

from typing import Any

from app.db import is_sqlite, unit_of_work
from app.errors import NotFound
from app.models import Agent, Function, PhoneNumber, Tenant
from app.services import audit, limits, snapshots
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


def lock_agent(*, tenant: Tenant, agent_id: str) -> Agent:
    """get_agent for a change that makes a version: inside a transaction, with the agent's row
    locked until commit (PostgreSQL; SQLite's IMMEDIATE transaction serialises writers
    already), so the changes to one agent and its functions make their versions in turn.

    FOR NO KEY UPDATE, not FOR UPDATE: a row that names the agent (a call starting on one of
    its numbers) still goes in meanwhile. With FOR UPDATE it would wait, holding the tenant's
    row, for this change, which may itself wait for the tenant's row (the functions cap): a
    deadlock."""
    query = Agent.select().where(
        (Agent.id == agent_id) & (Agent.tenant == tenant) & Agent.deleted_at.is_null()
    )
    if not is_sqlite():
        # peewee takes the lock clause as a string (documented); its type stubs say bool only.
        query = query.for_update("FOR NO KEY UPDATE")  # type: ignore[arg-type]
    agent = query.first()
    if agent is None:
        raise NotFound(f"Agent {agent_id} not found.")
    return agent


def create_agent(*, tenant: Tenant, actor: Actor, **fields: Any) -> Agent:
    """A new agent, at its version 1."""
    with unit_of_work():
        limits.check(tenant.id, "agents")
        agent = Agent.create(id=new_id("agent"), tenant=tenant, **fields)
        snapshots.record_first(agent, actor=actor)
        audit.write(actor, tenant_id=tenant.id, action="agent.created", target_id=agent.id)
    return agent


def update_agent(*, tenant: Tenant, actor: Actor, agent_id: str, **fields: Any) -> Agent:
    """Change any writable fields; a change to a call-facing one makes the next version. The
    audit entry names the fields whose value changed (none: no entry)."""
    with unit_of_work():
        agent = lock_agent(tenant=tenant, agent_id=agent_id)
        changed = [name for name, value in fields.items() if getattr(agent, name) != value]
        changes = snapshots.call_facing_changes(agent, fields)
        for name, value in fields.items():
            setattr(agent, name, value)
        agent.updated_at = utcnow()
        agent.save()
        if changes:
            snapshots.record(agent, actor=actor, changes=changes)
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
        PhoneNumber.update(agent=None, agent_version=None, updated_at=now).where(
            PhoneNumber.agent == agent
        ).execute()
        Function.delete().where(Function.agent == agent).execute()
        agent.deleted_at = agent.updated_at = now
        agent.is_active = False
        agent.save()
        audit.write(actor, tenant_id=tenant.id, action="agent.deleted", target_id=agent.id)
