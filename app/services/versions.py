"""Agent versions: an agent's history of what its calls used, one version read whole, a
restore that makes a new version equal to an earlier one, the version a number is pinned to,
and how each version's calls went."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import peewee as pw

from app.db import unit_of_work
from app.errors import NotFound, ValidationFailed
from app.models import Agent, AgentVersion, Call, FunctionInvocation, Tenant
from app.services import agents as agent_service
from app.services import audit, snapshots
from app.services import functions as function_service
from app.services.audit import Actor
from app.services.pages import Page
from app.util import utcnow

STATS_DAYS = 30  # the range of the stats when none is given: the last 30 days


def list_versions(*, tenant: Tenant, agent_id: str, limit: int, offset: int) -> Page:
    """One page of the agent's versions, newest first (its version is their count)."""
    agent = agent_service.get_agent(tenant=tenant, agent_id=agent_id)
    query = (
        AgentVersion.select(
            AgentVersion.version,
            AgentVersion.created_at,
            AgentVersion.changes,
            AgentVersion.actor_type,
            AgentVersion.actor_id,
            AgentVersion.actor_label,
        )
        .where(AgentVersion.agent == agent)
        .order_by(AgentVersion.version.desc())
    )
    rows = list(query.limit(limit + 1).offset(offset))
    return Page(
        items=rows[:limit],
        total=agent.version,
        limit=limit,
        offset=offset,
        has_more=len(rows) > limit,
    )


def _version_of(agent: Agent, version: int) -> AgentVersion:
    found = AgentVersion.get_or_none(
        (AgentVersion.agent == agent) & (AgentVersion.version == version)
    )
    if found is None:
        raise NotFound(f"Agent {agent.id} has no version {version}.")
    return found


def get_version(*, tenant: Tenant, agent_id: str, version: int) -> AgentVersion:
    """One version of the tenant's agent, whole, or NotFound."""
    agent = agent_service.get_agent(tenant=tenant, agent_id=agent_id)
    return _version_of(agent, version)


def previous_of(version: AgentVersion) -> AgentVersion | None:
    """The version before this one (None for version 1)."""
    return AgentVersion.get_or_none(
        (AgentVersion.agent == version.agent_id) & (AgentVersion.version == version.version - 1)
    )


def restore(*, tenant: Tenant, actor: Actor, agent_id: str, version: int) -> Agent:
    """Make the agent's next version equal to version: its call-facing fields and its
    functions (see functions.restore_definitions). A version equal to what the agent holds
    now changes nothing and makes none (and no audit entry)."""
    with unit_of_work():
        agent = agent_service.lock_agent(tenant=tenant, agent_id=agent_id)
        target = _version_of(agent, version)
        fields = {name: getattr(target, name) for name in snapshots.CALL_FIELDS}
        changes = snapshots.call_facing_changes(agent, fields)
        if function_service.restore_definitions(agent=agent, entries=target.functions):
            changes.append(snapshots.FUNCTIONS)
        if not changes:
            return agent
        for name, value in fields.items():
            setattr(agent, name, value)
        agent.updated_at = utcnow()
        agent.save()
        snapshots.record(agent, actor=actor, changes=changes)
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="agent.restored",
            target_id=agent.id,
            details={"version": agent.version, "restoredVersion": version, "changes": changes},
        )
    return agent


def check_pin(*, agent: Agent, version: int) -> None:
    """A number may be pinned to a version its agent has: ValidationFailed otherwise."""
    if not 1 <= version <= agent.version:
        raise ValidationFailed(
            "Invalid value for agentVersion.",
            details={
                "agentVersion": [
                    f"Agent {agent.id} has versions 1 to {agent.version}; {version} is none "
                    "of them."
                ]
            },
        )


@dataclass(frozen=True)
class VersionStats:
    """How one version's calls went, over a range of days."""

    version: int
    calls: int
    answered: int
    avg_talk_time_seconds: float | None  # of its answered calls that ended
    billed_minutes: int
    function_calls: int
    function_errors: int
    ai_cost_idr: int
    analyzed_calls: int = 0  # whose analysis is done (a verdict, successful or not)
    successful_calls: int = 0

    @property
    def success_rate(self) -> float | None:
        """Successful calls over analysed ones; None when none was analysed."""
        if not self.analyzed_calls:
            return None
        return round(self.successful_calls / self.analyzed_calls, 4)

    @property
    def answered_share(self) -> float:
        return round(self.answered / self.calls, 4) if self.calls else 0.0

    @property
    def function_error_rate(self) -> float | None:
        """Failed function calls over all of them; None when there were none."""
        if not self.function_calls:
            return None
        return round(self.function_errors / self.function_calls, 4)


def stats(
    *,
    tenant: Tenant,
    agent_id: str,
    from_: datetime | None = None,
    to: datetime | None = None,
) -> list[VersionStats]:
    """Each version's calls that started in [from_, to) (default: the last 30 days), newest
    version first; versions without calls in the range are left out.

    Two grouped reads over the (tenant, agent, started_at) index range of the agent's calls:
    the calls (with their analyses' verdicts: successful is set once an analysis is done),
    and their function calls by outcome.
    """
    agent = agent_service.get_agent(tenant=tenant, agent_id=agent_id)
    if from_ is None:
        from_ = utcnow() - timedelta(days=STATS_DAYS)
    if to is not None and to <= from_:
        raise ValidationFailed("Invalid value for to.", details={"to": ["Must be after from."]})
    condition = (
        (Call.tenant == tenant)
        & (Call.agent == agent)
        & (Call.started_at >= from_)
        & Call.agent_version.is_null(False)
    )
    if to is not None:
        condition &= Call.started_at < to
    successful = pw.Case(None, [(Call.successful == True, 1)], 0)  # noqa: E712 - SQL
    talk_time = pw.Case(None, [(Call.answered_at.is_null(False), Call.talk_time_seconds)], None)
    calls = (
        Call.select(
            Call.agent_version,
            pw.fn.COUNT(Call.id),
            pw.fn.COUNT(Call.answered_at),
            pw.fn.AVG(talk_time),
            pw.fn.COALESCE(pw.fn.SUM(Call.billed_minutes), 0),
            pw.fn.COALESCE(pw.fn.SUM(Call.function_calls_count), 0),
            pw.fn.COALESCE(pw.fn.SUM(Call.ai_cost_idr), 0),
            pw.fn.COUNT(Call.successful),
            pw.fn.COALESCE(pw.fn.SUM(successful), 0),
        )
        .where(condition)
        .group_by(Call.agent_version)
        .tuples()
    )
    failed = pw.Case(None, [(FunctionInvocation.status == "failed", 1)], 0)
    errors = (
        FunctionInvocation.select(Call.agent_version, pw.fn.SUM(failed))
        .join(Call, on=(FunctionInvocation.call == Call.id))
        .where(condition)
        .group_by(Call.agent_version)
        .tuples()
    )
    failures = dict(cast(list[tuple[int, Any]], list(errors)))
    rows = cast(list[tuple[int, int, int, Any, Any, Any, Any, Any, Any]], list(calls))
    found = [
        VersionStats(
            version=version,
            calls=int(count),
            answered=int(answered),
            avg_talk_time_seconds=None if average is None else round(float(average), 1),
            billed_minutes=int(minutes),
            function_calls=int(function_calls),
            function_errors=int(failures.get(version) or 0),
            ai_cost_idr=int(cost),
            analyzed_calls=int(analyzed),
            successful_calls=int(succeeded),
        )
        for (
            version,
            count,
            answered,
            average,
            minutes,
            function_calls,
            cost,
            analyzed,
            succeeded,
        ) in rows
    ]
    return sorted(found, key=lambda row: row.version, reverse=True)
