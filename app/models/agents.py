"""Agents and their immutable versions."""

import json
from typing import Any, cast

import peewee as pw

from app.db import BaseModel
from app.models.fields import JSONField, id_field
from app.models.tenants import Tenant
from app.util import utcnow

# An agent's analysis plan when none was given, a summary only (app.services.analysis): the
# column's default in the database and, as a new dict each time, in Python.
PLAN_SQL = '{"summary":true,"fields":[]}'


def default_plan() -> dict[str, Any]:
    return cast(dict[str, Any], json.loads(PLAN_SQL))


class Agent(BaseModel):
    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="agents", on_delete="CASCADE")
    name = pw.CharField(max_length=100)
    system_prompt = pw.TextField()
    voice_id = pw.CharField(max_length=16, default="Puck")
    greeting_text = pw.TextField(default="")
    language = pw.CharField(max_length=16, default="id")
    max_call_duration_minutes = pw.IntegerField(default=10)
    tools_enabled = JSONField(default=list)
    is_active = pw.BooleanField(default=True)
    escalation_number = pw.CharField(max_length=16, null=True)
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)
    deleted_at = pw.DateTimeField(null=True)
    # The latest of its versions (AgentVersion), whose snapshot is what the fields above and
    # its live functions hold now; the database has the default too (migration 017).
    version = pw.IntegerField(default=1, constraints=[pw.SQL("DEFAULT 1")])
    # What the analysis of its calls asks for (app.services.analysis; migration 022).
    analysis_plan = JSONField(default=default_plan, constraints=[pw.SQL(f"DEFAULT '{PLAN_SQL}'")])

    class Meta:
        indexes = ((("tenant", "deleted_at", "created_at"), False),)


class AgentVersion(BaseModel):
    """An immutable snapshot of what a call uses of an agent (app.services.versions): its
    call-facing fields and its functions' definitions, never a secret."""

    agent = pw.ForeignKeyField(Agent, backref="versions", on_delete="CASCADE")
    version = pw.IntegerField()  # 1, 2, 3, … per agent
    name = pw.CharField(max_length=100)
    system_prompt = pw.TextField()
    voice_id = pw.CharField(max_length=16)
    greeting_text = pw.TextField()
    language = pw.CharField(max_length=16)
    max_call_duration_minutes = pw.IntegerField()
    tools_enabled = JSONField()
    escalation_number = pw.CharField(max_length=16, null=True)
    # The digests of its functions' definitions (FunctionDefinition), by name: an unchanged
    # definition is stored once per agent, not again in every version (migration 020).
    function_digests = JSONField(column_name="functions")
    analysis_plan = JSONField(default=default_plan, constraints=[pw.SQL(f"DEFAULT '{PLAN_SQL}'")])
    changes = JSONField()  # the API names of what differs from the version before
    actor_type = pw.CharField(max_length=8)  # as an AuditEntry's
    actor_id = pw.CharField(max_length=32, null=True)
    actor_label = pw.CharField(max_length=255)
    created_at = pw.DateTimeField(default=utcnow)

    _functions: list[dict[str, Any]] | None = None

    @property
    def functions(self) -> list[dict[str, Any]]:
        """[{id, name, description, endpoint, method, parameters, timeout_ms}] by name: the id
        is the Function row whose signing secret signs this version's calls of it."""
        if self._functions is None:
            self._functions = definitions_of(self.agent_id, self.function_digests)
        return self._functions

    @functions.setter
    def functions(self, entries: list[dict[str, Any]]) -> None:
        # A version made up in memory (a call from before versions): nothing to read.
        self._functions = entries

    @property
    def actor(self) -> dict[str, str | None]:
        """Who made it, as the API shows it."""
        return {"type": self.actor_type, "id": self.actor_id, "label": self.actor_label}

    class Meta:
        # The key is the read path: one version, or an agent's newest first.
        primary_key = pw.CompositeKey("agent", "version")


class FunctionDefinition(BaseModel):
    """A function's definition as versions keep it, once per agent and content: a version
    holds the digests of its functions' definitions (app.services.snapshots)."""

    agent = pw.ForeignKeyField(Agent, backref="function_definitions", on_delete="CASCADE")
    digest = pw.CharField(max_length=64)  # sha256 of the entry as sorted compact JSON
    # {id, name, description, endpoint, method, parameters, timeout_ms}
    entry = JSONField()
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "function_definition"
        primary_key = pw.CompositeKey("agent", "digest")


def definitions_of(agent_id: str, digests: list[str]) -> list[dict[str, Any]]:
    """The definitions of those digests of the agent's, in their order."""
    if not digests:
        return []
    query = (
        FunctionDefinition.select(FunctionDefinition.digest, FunctionDefinition.entry)
        .where((FunctionDefinition.agent == agent_id) & FunctionDefinition.digest.in_(digests))
        .tuples()
    )
    found = dict(cast(list[tuple[str, dict[str, Any]]], list(query)))
    return [found[digest] for digest in digests]
