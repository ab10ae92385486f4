"""Agent functions: definitions the AI may call mid-call, and the rules their arguments obey.

Creating, changing or deleting one makes its agent's next version (app.services.snapshots).
A deleted function keeps its row, out of every list, for the versions that have it.
"""

import json
from typing import Any, cast

from peewee import fn

from app.db import unit_of_work
from app.errors import Conflict, NotFound, ValidationFailed
from app.models import Agent, Function, Tenant
from app.outbound.policy import require_safe_url
from app.services import agents as agent_service
from app.services import audit, limits, secrets, snapshots
from app.services.audit import Actor
from app.util import isoformat, new_id, utcnow

# A function's timeoutMs: what its endpoint gets of a live call's or a test's time.
MIN_TIMEOUT_MS = 500
MAX_TIMEOUT_MS = 5000
DEFAULT_TIMEOUT_MS = 5000
SECRET_PREFIX = "fsec_"  # of a generated signing secret
# Sizes that multiply (every version and every session carries the definitions).
MAX_DEFINITION_BYTES = 64 * 1024  # a whole definition, as compact JSON
MAX_DESCRIPTION = 1024
MAX_ENUM_VALUES = 100
MAX_ENUM_VALUE = 256  # characters of a value (one that is not a string: as compact JSON)

JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


LIVE = Function.deleted_at.is_null()


def list_functions(*, tenant: Tenant, agent_id: str) -> list[Function]:
    agent = agent_service.get_agent(tenant=tenant, agent_id=agent_id)
    query = Function.select().where((Function.agent == agent) & LIVE)
    return list(query.order_by(Function.created_at))


def count_by_agent(*, tenant: Tenant) -> dict[str, int]:
    """How many functions each of the tenant's agents has (agents without any are left out)."""
    query = (
        Function.select(Function.agent, fn.COUNT(Function.id))
        .where((Function.tenant == tenant) & LIVE)
        .group_by(Function.agent)
    )
    return dict(cast(list[tuple[str, int]], list(query.tuples())))


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def enum_value_length(value: Any) -> int:
    """The characters an enum value counts: a string's own, any other value's as JSON."""
    return len(value) if isinstance(value, str) else len(compact_json(value))


def check_definition_size(definition: dict[str, Any]) -> None:
    """ValidationFailed naming parameters (the part that can grow) when the definition
    (name, description, endpoint, method, parameters, timeoutMs) passes 64 KiB as compact
    JSON."""
    size = len(compact_json(definition).encode())
    if size > MAX_DEFINITION_BYTES:
        raise ValidationFailed(
            "Invalid value for parameters.",
            details={
                "parameters": [
                    f"The function's definition is {size:,} bytes as compact JSON; at most "
                    f"{MAX_DEFINITION_BYTES:,} (64 KiB)."
                ]
            },
        )


def _definition(function: Function) -> dict[str, Any]:
    return {field: getattr(function, field) for field in ("name", *snapshots.DEFINITION_FIELDS)}


def get_function(*, agent: Agent, name: str) -> Function:
    function = Function.get_or_none((Function.agent == agent) & (Function.name == name) & LIVE)
    if function is None:
        raise NotFound(f"Function {name} not found on agent {agent.id}.")
    return function


def create_function(
    *, tenant: Tenant, actor: Actor, agent_id: str, secret: str | None = None, **fields: Any
) -> Function:
    """Define a function on one of the tenant's agents; names are unique per agent (among its
    live functions). Makes the agent's next version. The endpoint's host is resolved (the URL
    rules) before the transaction opens."""
    check_definition_size(
        {field: fields.get(field) for field in ("name", *snapshots.DEFINITION_FIELDS)}
    )
    require_safe_url(fields["endpoint"], field="endpoint")
    with unit_of_work():
        agent = agent_service.lock_agent(tenant=tenant, agent_id=agent_id)
        exists = Function.select().where(
            (Function.agent == agent) & (Function.name == fields["name"]) & LIVE
        )
        if exists.exists():
            raise Conflict(f"Agent {agent.id} already has a function named {fields['name']}.")
        limits.check(tenant.id, "functions", scope=agent.id)
        function = Function.create(
            id=new_id("fn"),
            tenant=tenant,
            agent=agent,
            signing_secret=secret or secrets.generate(SECRET_PREFIX),
            **fields,
        )
        snapshots.record(agent, actor=actor, changes=[snapshots.FUNCTIONS])
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="function.created",
            target_id=function.id,
            details={"agentId": agent.id},
        )
    return function


def update_function(
    *, tenant: Tenant, actor: Actor, agent_id: str, name: str, **fields: Any
) -> Function:
    """Change any of a function's description, endpoint, method, parameters and timeoutMs; a
    new endpoint's host is resolved before the transaction opens. A change makes the agent's
    next version; the audit entry names the fields whose value changed (none: no entry)."""
    if "endpoint" in fields:
        require_safe_url(fields["endpoint"], field="endpoint")
    with unit_of_work():
        agent = agent_service.lock_agent(tenant=tenant, agent_id=agent_id)
        function = get_function(agent=agent, name=name)
        changed = [field for field, value in fields.items() if getattr(function, field) != value]
        check_definition_size({**_definition(function), **fields})
        for field, value in fields.items():
            setattr(function, field, value)
        function.updated_at = utcnow()
        function.save()
        if changed:
            snapshots.record(agent, actor=actor, changes=[snapshots.FUNCTIONS])
            audit.write(
                actor,
                tenant_id=tenant.id,
                action="function.updated",
                target_id=function.id,
                details={"agentId": agent.id, **audit.fields(changed)},
            )
    return function


def rotate_secret(
    *,
    tenant: Tenant,
    actor: Actor,
    agent_id: str,
    name: str,
    secret: str | None = None,
    overlap_hours: int = secrets.DEFAULT_OVERLAP_HOURS,
) -> tuple[Function, str]:
    """Give the function a new signing secret (the one given, or a generated fsec_…): its
    requests are signed with it at once, and with the current one beside it until the overlap
    ends. The function and its new secret."""
    with unit_of_work():
        agent = agent_service.get_agent(tenant=tenant, agent_id=agent_id)
        function = get_function(agent=agent, name=name)
        new = secret or secrets.generate(SECRET_PREFIX)
        now = utcnow()
        secrets.rotate(
            function, field="signing_secret", secret=new, overlap_hours=overlap_hours, now=now
        )
        function.updated_at = now
        function.save()
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="function.secret_rotated",
            target_id=function.id,
            details={
                "agentId": agent.id,
                "overlapHours": overlap_hours,
                "previousSecretExpiresAt": isoformat(function.overlap_ends_at),
            },
        )
    return function, new


def delete_function(*, tenant: Tenant, actor: Actor, agent_id: str, name: str) -> None:
    """Take the function off the agent (its next version has it no more). The row stays,
    deleted, with its signing secret: calls answered with an earlier version still call it."""
    with unit_of_work():
        agent = agent_service.lock_agent(tenant=tenant, agent_id=agent_id)
        function = get_function(agent=agent, name=name)
        function.deleted_at = function.updated_at = utcnow()
        function.save()
        snapshots.record(agent, actor=actor, changes=[snapshots.FUNCTIONS])
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="function.deleted",
            target_id=function.id,
            details={"agentId": agent.id},
        )


def restore_definitions(*, agent: Agent, entries: list[dict[str, Any]]) -> bool:
    """Make the agent's live functions those of a version's entries (inside the restore's
    transaction): a function of the same name gets the entry's definition and keeps its
    secret; one the agent no longer has comes back with the secret it had (its row, by the
    entry's id); the others are deleted. Whether anything changed."""
    now = utcnow()
    wanted = {entry["name"]: entry for entry in entries}
    live = {function.name: function for function in snapshots.live_functions(agent.id)}
    changed = False
    for name, gone in live.items():
        if name not in wanted:
            gone.deleted_at = gone.updated_at = now
            gone.save()
            changed = True
    for name, entry in wanted.items():
        definition = {field: entry[field] for field in snapshots.DEFINITION_FIELDS}
        found = live.get(name)
        new = False
        if found is None:
            found = Function.get_or_none((Function.id == entry["id"]) & (Function.agent == agent))
            if found is None:  # gone with its secret: a new one, to rotate before use
                found = Function(
                    id=new_id("fn"),
                    tenant=agent.tenant_id,
                    agent=agent,
                    name=name,
                    signing_secret=secrets.generate(SECRET_PREFIX),
                    created_at=now,
                )
                new = True
            found.deleted_at = None
        elif all(getattr(found, field) == value for field, value in definition.items()):
            continue
        function = found
        for field, value in definition.items():
            setattr(function, field, value)
        function.updated_at = now
        function.save(force_insert=new)
        changed = True
    return changed


def _matches(value: Any, spec: dict[str, Any]) -> bool:
    expected = JSON_TYPES[spec["type"]]
    if isinstance(value, bool) and bool not in expected:
        return False  # JSON true is not a number
    if not isinstance(value, expected):
        return False
    if "enum" in spec and value not in spec["enum"]:
        return False
    if spec["type"] == "array" and "items" in spec:
        return all(_matches(item, spec["items"]) for item in cast(list, value))
    return True


def argument_errors(schema: dict[str, Any], values: Any) -> dict[str, list[str]]:
    """Per-parameter problems of values against a function's declared parameters ({} = valid)."""
    if not isinstance(values, dict):
        return {"parameters": ["Must be an object."]}
    properties = schema.get("properties", {})
    errors: dict[str, list[str]] = {}
    for name in schema.get("required", []):
        if name not in values:
            errors[name] = ["Missing required parameter."]
    for name, value in values.items():
        spec = properties.get(name)
        if spec is None:
            errors[name] = ["Unknown parameter."]
        elif not _matches(value, spec):
            detail = f" one of {spec['enum']}" if "enum" in spec else ""
            errors[name] = [f"Must be of type {spec['type']}{detail}."]
    return errors


def example_parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """Values that fit a function's declared parameters (the first of an enum, else an empty
    or zero value of the type): a starting point for a test."""
    return {name: _example(spec) for name, spec in schema.get("properties", {}).items()}


def _example(spec: dict[str, Any]) -> Any:
    if spec.get("enum"):
        return spec["enum"][0]
    empty = {"string": "", "number": 0, "integer": 0, "boolean": False, "array": [], "object": {}}
    return empty[spec["type"]]
