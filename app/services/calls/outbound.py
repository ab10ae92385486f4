"""Outbound calls: queued by a tenant (or a campaign), then claimed by a runtime (dispatch),
which admits each exactly as an inbound start is admitted.

Lock order, so that no two transactions wait on each other on PostgreSQL: a tenant's row
before its campaigns' rows (every step that ends a call locks the tenant first: its event
takes the tenant's seq). Dispatch takes its queued calls and then their tenants with SKIP
LOCKED, so it never waits: a call whose tenant is busy stays queued for the next claim.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from app import metrics
from app.db import is_sqlite, transaction, unit_of_work
from app.errors import Conflict, NotFound, ValidationFailed
from app.models import Agent, AgentVersion, Call, PhoneNumber, Tenant
from app.services import audit, billing, campaign_progress, events
from app.services import tenants as tenant_service
from app.services.calls import admission, history, lifecycle
from app.services.calls.constants import (
    MAX_DISPATCH_BYTES,
    MAX_SESSION_BYTES,
    SESSION_TOO_LARGE,
    metadata_bytes,
)
from app.services.whatsapp import permissions
from app.util import new_id, utcnow

# Calls queued per INSERT statement (a campaign queues many at once).
INSERT_BATCH = 500


@dataclass(frozen=True)
class Outbound:
    """A call to queue: from a tenant's number, answered by an agent, to a number."""

    phone_number_id: str
    caller_number: str  # the business number's displayNumber: what the callee sees
    agent_id: str
    to: str
    variables: dict[str, str]
    metadata: dict[str, Any] = field(default_factory=dict)
    campaign_id: str | None = None
    contact_id: str | None = None
    # Agent versions will pin a queued call to one here (None: the agent's latest).


@dataclass(frozen=True)
class Route:
    """How a claimed call is placed: its number's channel (phone or whatsapp) and, for a
    WhatsApp number, Meta's id of it (the runtime calls Graph with it)."""

    channel: str = "phone"
    whatsapp_phone_number_id: str | None = None


@dataclass(frozen=True)
class Claimed:
    """A call claimed by dispatch: now ringing, with its session and its number's route."""

    call: Call
    session: dict[str, Any]
    channel: str
    whatsapp_phone_number_id: str | None


def outbound_line(
    *, tenant: Tenant, phone_number_id: str, agent_id: str | None
) -> tuple[PhoneNumber, Agent]:
    """The tenant's number that places calls and the agent that talks in them: agent_id, or
    the number's agent. NotFound for another tenant's ids; 422 for an inactive number; 409
    no_agent when there is no agent or it is inactive."""
    number = PhoneNumber.get_or_none(
        (PhoneNumber.id == phone_number_id) & (PhoneNumber.tenant == tenant)
    )
    if number is None:
        raise NotFound(f"Phone number {phone_number_id} not found.")
    if not number.is_active:
        raise ValidationFailed(
            "Invalid value for phoneNumberId.",
            details={"phoneNumberId": ["This number is inactive: it places no calls."]},
        )
    wanted = agent_id or number.agent_id
    if wanted is None:
        raise Conflict(
            f"Phone number {number.id} has no agent: send agentId, or assign an agent to the "
            "number.",
            code="no_agent",
            details={"phoneNumberId": number.id},
        )
    agent = Agent.get_or_none(
        (Agent.id == wanted) & (Agent.tenant == tenant) & Agent.deleted_at.is_null()
    )
    if agent is None:
        raise NotFound(f"Agent {wanted} not found.")
    if not agent.is_active:
        raise Conflict(
            f"Agent {agent.id} is inactive: it takes no calls.",
            code="no_agent",
            details={"agentId": agent.id},
        )
    return number, agent


def placing_version(number: PhoneNumber, agent: Agent) -> AgentVersion:
    """What would talk in a call placed from number now, chosen as dispatch chooses it: the
    number's pinned version when the agent is the number's, else the agent as it is (its
    latest version)."""
    pinned = number.agent_version if number.agent_id == agent.id else None
    if pinned is not None and pinned != agent.version:
        found = AgentVersion.get_or_none(
            (AgentVersion.agent == agent.id) & (AgentVersion.version == pinned)
        )
        if found is not None:
            return cast(AgentVersion, found)
    return AgentVersion(system_prompt=agent.system_prompt, greeting_text=agent.greeting_text)


def check_available_credit(tenant_id: str) -> None:
    """Conflict no_credits when the tenant has no minutes left that a call could hold."""
    available = (
        Tenant.select(Tenant.balance_minutes - Tenant.reserved_minutes)
        .where(Tenant.id == tenant_id)
        .scalar()
    )
    if available is None or available <= 0:
        raise Conflict(
            "The tenant has no credit minutes available for a call: grant credits first.",
            code="no_credits",
            details={},
        )


def queue_calls(*, tenant_id: str, outbounds: list[Outbound], now: datetime) -> list[str]:
    """Insert outbound calls as queued, counted in the tenant's calls; their ids. Call inside
    a transaction (it locks the tenant row until commit)."""
    Tenant.update({Tenant.calls_count: Tenant.calls_count + len(outbounds)}).where(
        Tenant.id == tenant_id
    ).execute()
    rows: list[dict[str, Any]] = [
        {
            "id": new_id("call"),
            "tenant": tenant_id,
            "phone_number": outbound.phone_number_id,
            "agent": outbound.agent_id,
            "caller_number": outbound.caller_number,
            "callee_number": outbound.to,
            "direction": "outbound",
            "status": "queued",
            "started_at": now,
            # A microsecond apart, so dispatch (oldest first) hands them out in this order.
            "queued_at": now + timedelta(microseconds=index),
            "updated_at": now,
            "variables": outbound.variables,
            "metadata": outbound.metadata,
            "campaign": outbound.campaign_id,
            "contact": outbound.contact_id,
        }
        for index, outbound in enumerate(outbounds)
    ]
    for start in range(0, len(rows), INSERT_BATCH):
        Call.insert_many(rows[start : start + INSERT_BATCH]).execute()
    metrics.CALLS.labels("queued").inc(len(rows))
    return [row["id"] for row in rows]


def place_call(
    *,
    tenant: Tenant,
    actor: audit.Actor,
    phone_number_id: str,
    to: str,
    agent_id: str | None = None,
    variables: dict[str, str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Call:
    """Queue an outbound call for a runtime to claim (dispatch); 409 no_agent or no_credits;
    422 for variables that would fill its session past its size. From a WhatsApp number only
    with the user's call permission (a valid stored grant, else Meta is asked first, before
    the transaction): 409 no_call_permission without it, and no call is created."""
    number, agent = outbound_line(tenant=tenant, phone_number_id=phone_number_id, agent_id=agent_id)
    if variables:
        talking = placing_version(number, agent)
        admission.check_session_size(talking.system_prompt, talking.greeting_text, variables)
    if number.channel == "whatsapp":
        permissions.require_whatsapp(number)
        permissions.require_call_permission(number, to)
    with unit_of_work():
        check_available_credit(tenant.id)
        (call_id,) = queue_calls(
            tenant_id=tenant.id,
            outbounds=[
                Outbound(
                    phone_number_id=number.id,
                    caller_number=number.display_number,
                    agent_id=agent.id,
                    to=to,
                    variables=variables or {},
                    metadata=metadata or {},
                )
            ],
            now=utcnow(),
        )
        audit.write(actor, tenant_id=tenant.id, action="call.placed", target_id=call_id)
    return Call.get_by_id(call_id)


def _canceled_values(now: datetime) -> dict[str, Any]:
    return dict(status="canceled", ended_at=now, hangup_reason="canceled")


def cancel_call(*, tenant: Tenant, actor: audit.Actor, call_id: str) -> Call:
    """queued → canceled (it is never dialled); any other status: 409 illegal_transition. A
    campaign's call canceled alone fails its contact: the tenant gave that contact up."""
    with unit_of_work():
        found = history.get_call(tenant=tenant, call_id=call_id)
        if not is_sqlite():
            Tenant.select(Tenant.id).where(Tenant.id == tenant.id).for_update().execute()
        call = lifecycle.update_if(
            found.id,
            (Call.tenant == tenant) & (Call.status == "queued"),
            **_canceled_values(utcnow()),
        )
        if call is None:
            current = history.get_call(tenant=tenant, call_id=call_id)
            raise Conflict(
                f"A call that is {current.status} cannot be canceled: only a queued call can.",
                code="illegal_transition",
                details={"status": current.status},
            )
        campaign_progress.contact_done(call)
        audit.write(actor, tenant_id=tenant.id, action="call.canceled", target_id=call.id)
    return call


def has_queued() -> bool:
    """Whether any call waits for a runtime to claim it."""
    return bool(Call.select(Call.id).where(Call.status == "queued").exists())


def cancel_campaign_calls(*, campaign_id: str) -> int:
    """Cancel the campaign's queued calls (their contacts go back to pending); how many.
    Call inside the transaction that cancels the campaign, after locking its tenant."""
    canceled = list(
        Call.update(updated_at=utcnow(), **_canceled_values(utcnow()))
        .where((Call.campaign == campaign_id) & (Call.status == "queued"))
        .returning(Call)
        .execute()
    )
    for call in canceled:
        campaign_progress.contact_done(call)
    if canceled:
        metrics.CALLS.labels("canceled").inc(len(canceled))
    return len(canceled)


def _answering_version(call_id: str) -> tuple[AgentVersion | None, Route]:
    """The version of the agent that talks in a queued call, chosen as for an inbound start:
    the number's pinned version when the call's agent is the number's, else the agent's
    latest; None when the agent (or the number the call is placed from) can no longer take
    calls. With it, the route of the number the call is placed from (read in the same
    query)."""
    row = (
        Call.select(
            Agent.id,
            Agent.version,
            PhoneNumber.agent,
            PhoneNumber.agent_version,
            PhoneNumber.channel,
            PhoneNumber.whatsapp_phone_number_id,
        )
        .join(Agent, on=(Agent.id == Call.agent))
        .switch(Call)
        .join(PhoneNumber, on=(PhoneNumber.id == Call.phone_number))
        .where(
            (Call.id == call_id)
            & Agent.is_active
            & Agent.deleted_at.is_null()
            & PhoneNumber.is_active
        )
        .tuples()
        .first()
    )
    if row is None:
        return None, Route()
    agent_id, latest, number_agent_id, pinned, channel, whatsapp_id = row
    wanted = pinned if number_agent_id == agent_id and pinned is not None else latest
    version = cast(
        AgentVersion | None,
        AgentVersion.get_or_none(
            (AgentVersion.agent == agent_id) & (AgentVersion.version == wanted)
        ),
    )
    return version, Route(channel=channel, whatsapp_phone_number_id=whatsapp_id)


def _lock_tenants(tenant_ids: set[str]) -> dict[str, list[Any]]:
    """The tenants' balance, holds, calls in progress and limit, their rows locked until
    commit; on PostgreSQL a tenant whose row another transaction holds is left out (SKIP
    LOCKED): its calls wait for the next claim rather than this one waiting."""
    query = (
        Tenant.select(
            Tenant.id,
            Tenant.balance_minutes,
            Tenant.reserved_minutes,
            Tenant.active_calls,
            tenant_service.concurrent_call_limit_sql(),
        )
        .where(Tenant.id.in_(sorted(tenant_ids)))
        .order_by(Tenant.id)
    )
    if not is_sqlite():
        query = query.for_update(skip_locked=True)
    rows = cast(list[tuple[Any, ...]], list(query.tuples()))
    return {row[0]: list(row[1:]) for row in rows}


def too_large(agent: AgentVersion | None, variables: dict[str, str]) -> bool:
    """Whether the call's session, filled with its variables, would pass MAX_SESSION_BYTES:
    checked when it was queued, and again when it is claimed, as its agent may have changed."""
    if agent is None:
        return False
    size = admission.session_bytes(agent.system_prompt, agent.greeting_text, variables)
    return size > MAX_SESSION_BYTES


def _candidates(*, max_calls: int, channel: str | None) -> Any:
    """The queued calls a claim considers, oldest first: twice max_calls (some may be left
    out), of tenants below their concurrency limit and, when channel is named, placed from
    a number of that channel. On PostgreSQL they are locked, skipping those another claim
    holds."""
    candidates = (
        Call.select(Call.id, Call.tenant, Call.variables)
        .join(Tenant, on=(Tenant.id == Call.tenant))
        .where(
            (Call.status == "queued")
            & (Tenant.active_calls < tenant_service.concurrent_call_limit_sql())
        )
        .order_by(Call.queued_at, Call.id)
        .limit(max_calls * 2)
    )
    if channel is not None:
        # A runtime that places calls of one channel only leaves the others queued.
        candidates = (
            candidates.switch(Call)
            .join(PhoneNumber, on=(PhoneNumber.id == Call.phone_number))
            .where(PhoneNumber.channel == channel)
        )
    if not is_sqlite():
        candidates = candidates.for_update(of=Call, skip_locked=True)
    return candidates


def dispatch(*, max_calls: int, channel: str | None = None) -> list[Claimed]:
    """Claim up to max_calls queued calls, oldest first, for a runtime (only those placed from
    a number of the channel, phone or whatsapp, when one is named): each is admitted as an
    inbound start is (credit hold, a concurrent-call slot, ringing, call.started) and
    returned with its session and its number's route (channel, and Meta's id of a WhatsApp
    number). A call whose tenant is at its concurrency limit stays queued;
    one whose tenant has no credit left (or whose agent can no longer answer) fails, as a
    start would, with no_credits (or no_agent), and one whose agent's prompt has grown since
    it was queued so that its session would pass MAX_SESSION_BYTES fails with
    session_too_large. The sessions handed out are at most
    MAX_DISPATCH_BYTES as compact JSON: a call that would pass it stays queued for the next
    claim (the first is always taken), and smaller ones after it may still be taken.

    Two runtimes claiming at once never get the same call: on PostgreSQL the candidates are
    locked with SKIP LOCKED (another claim takes others), and every claim is a conditional
    UPDATE of a queued call (on SQLite the IMMEDIATE transaction runs claims one at a time).
    """
    now = utcnow()
    claimed: list[Claimed] = []
    with transaction():
        candidates = _candidates(max_calls=max_calls, channel=channel)
        rows = cast(list[tuple[str, str, dict[str, str]]], list(candidates.tuples()))
        tenants = _lock_tenants({tenant_id for _, tenant_id, _ in rows})
        room = MAX_DISPATCH_BYTES
        for call_id, tenant_id, variables in rows:
            if len(claimed) >= max_calls:
                break
            if tenant_id not in tenants:
                continue  # another transaction holds the tenant: the next claim takes it
            state = tenants[tenant_id]
            balance, reserved, active, limit = state
            if active >= limit:
                continue  # stays queued until one of the tenant's calls ends
            agent, route = _answering_version(call_id)
            held, rejection = admission.decide(
                agent=agent, balance=balance, reserved=reserved, active=active, limit=limit
            )
            if rejection is None and too_large(agent, variables):
                held, rejection = 0, SESSION_TOO_LARGE
            session: dict[str, Any] = {}
            if rejection is None:
                assert agent is not None  # else it was rejected
                unsaved = Call(id=call_id, variables=variables, reserved_minutes=held)
                session = admission.build_session(agent, unsaved)
                size = metadata_bytes(session)
                if claimed and size > room:
                    continue  # stays queued: the next claim has room for it
                room -= size
            values: dict[str, Any] = dict(
                status="failed" if rejection else "ringing",
                started_at=now,
                agent_version=agent.version if agent else None,
                reserved_minutes=held,
                reservation_expires_at=admission.hold_expiry(now, held),
                **(admission.rejected_values(rejection, now) if rejection else {}),
            )
            call = lifecycle.update_if(call_id, Call.status == "queued", **values)
            if call is None:
                continue  # canceled (or claimed) since it was read
            if rejection is None:
                billing.admit(tenant_id=tenant_id, minutes=held)
                state[1], state[2] = reserved + held, active + 1
            events.emit(
                tenant_id=tenant_id,
                type="call.started",
                data={
                    "callId": call.id,
                    "phoneNumberId": call.phone_number_id,
                    "callerNumber": call.callee_number,  # the other party, as on a start
                    "did": call.caller_number,
                },
                occurred_at=now,
            )
            if rejection:
                events.emit(
                    tenant_id=tenant_id,
                    type="call.ended",
                    data=admission.ended_data(call),
                    occurred_at=now,
                )
                campaign_progress.contact_done(call)
                continue
            claimed.append(
                Claimed(
                    call=call,
                    session=session,
                    channel=route.channel,
                    whatsapp_phone_number_id=route.whatsapp_phone_number_id,
                )
            )
    return claimed
