"""Agent versions as they are made: after each change to what a call uses of an agent, the
change's own transaction writes the agent's next version, an immutable snapshot of its
call-facing fields and its live functions' definitions (never a secret); a definition is
stored once per agent and content, and a version holds their digests."""

import hashlib
import json
from typing import Any, cast

from app.models import Agent, AgentVersion, Function, FunctionDefinition
from app.services.audit import Actor
from app.util import camelcase

# What a call uses of an agent: a change to any of these (or to its functions) makes a
# version; isActive does not.
CALL_FIELDS = (
    "name",
    "system_prompt",
    "voice_id",
    "greeting_text",
    "language",
    "max_call_duration_minutes",
    "tools_enabled",
    "escalation_number",
    "analysis_plan",
)
# A function's definition as a version keeps it (its name besides).
DEFINITION_FIELDS = ("description", "endpoint", "method", "parameters", "timeout_ms")
FUNCTIONS = "functions"  # the change name of a version whose functions differ


def call_facing_changes(agent: Agent, fields: dict[str, Any]) -> list[str]:
    """The API names of the call-facing fields whose value fields would change, in
    CALL_FIELDS order."""
    return [
        camelcase(name)
        for name in CALL_FIELDS
        if name in fields and fields[name] != getattr(agent, name)
    ]


def function_entry(function: Function) -> dict[str, Any]:
    """A function as a version keeps it: its id (the row whose secret signs the calls), name
    and definition."""
    return {
        "id": function.id,
        "name": function.name,
        **{field: getattr(function, field) for field in DEFINITION_FIELDS},
    }


def live_functions(agent_id: str) -> list[Function]:
    """The agent's functions that are not deleted, by name."""
    return list(
        Function.select()
        .where((Function.agent == agent_id) & Function.deleted_at.is_null())
        .order_by(Function.name)
    )


def record(agent: Agent, *, actor: Actor, changes: list[str]) -> AgentVersion:
    """Make the agent's next version from what it holds now: call it inside the transaction
    that changed the agent or its functions, after the change, with the agent's row locked
    (app.services.agents.lock_agent), so versions of one agent are made one at a time."""
    agent.version += 1
    Agent.update(version=agent.version).where(Agent.id == agent.id).execute()
    return _snapshot(agent, actor=actor, changes=changes)


def record_first(agent: Agent, *, actor: Actor) -> AgentVersion:
    """Version 1 of an agent just created (in its transaction)."""
    return _snapshot(agent, actor=actor, changes=[])


def digest(entry: dict[str, Any]) -> str:
    """The key of a function entry among its agent's definitions: its content's sha256
    (the same in migration 020)."""
    text = json.dumps(entry, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def store_definitions(agent_id: str, entries: list[dict[str, Any]]) -> list[str]:
    """The digests of the entries, storing those the agent's definitions lack: a version
    refers to its functions' definitions rather than copying them."""
    digests = [digest(entry) for entry in entries]
    if not digests:
        return digests
    query = (
        FunctionDefinition.select(FunctionDefinition.digest)
        .where((FunctionDefinition.agent == agent_id) & FunctionDefinition.digest.in_(digests))
        .tuples()
    )
    stored = {row[0] for row in cast(list[tuple[str]], list(query))}
    missing = {key: entry for key, entry in zip(digests, entries, strict=True) if key not in stored}
    if missing:
        FunctionDefinition.insert_many(
            [{"agent": agent_id, "digest": key, "entry": entry} for key, entry in missing.items()]
        ).execute()
    return digests


def _snapshot(agent: Agent, *, actor: Actor, changes: list[str]) -> AgentVersion:
    entries = [function_entry(function) for function in live_functions(agent.id)]
    return AgentVersion.create(
        agent=agent.id,
        version=agent.version,
        **{name: getattr(agent, name) for name in CALL_FIELDS},
        function_digests=store_definitions(agent.id, entries),
        changes=changes,
        actor_type=actor.type,
        actor_id=actor.id,
        actor_label=actor.label[: AgentVersion.actor_label.max_length],
    )
