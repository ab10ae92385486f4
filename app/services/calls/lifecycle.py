"""Calls: the lifecycle the voice runtime reports, and the call history tenants read.

Every step changes the call, charges credits and writes its events in one transaction.
Steps that must happen once (answering, ending) are conditional UPDATEs on the status, so
two processes reporting the same step at once change and charge the call exactly once.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

import peewee as pw

from app import metrics
from app.db import is_sqlite, transaction, unit_of_work
from app.errors import Conflict, NotFound, ValidationFailed
from app.models import Agent, AgentVersion, Call, CallTurn, PhoneNumber, Tenant
from app.services import audit, billing, campaign_progress, events
from app.services import tenants as tenant_service
from app.services.calls import admission, history
from app.services.calls.constants import (
    COST_COMPONENTS,
    MAX_COST_IDR,
    MAX_METADATA_BYTES,
    MAX_TURN_BYTES,
    MAX_TURNS,
    OPEN_STATUSES,
    metadata_bytes,
)
from app.util import isoformat, new_id, utcnow

# Calls queued per INSERT statement (a campaign queues many at once).
INSERT_BATCH = 500
# The hangupReason of a call closed because its runtime never reported its end.
RUNTIME_LOST = "runtime_lost"


def _runtime_call(call_id: str) -> Call:
    """A call by id, for the runtime, which reports calls of every tenant."""
    call = Call.get_or_none(Call.id == call_id)
    if call is None:
        raise NotFound(f"Call {call_id} not found.")
    return call


def _update_if(call_id: str, condition: pw.Expression, **values: Any) -> Call | None:
    """UPDATE the call only where condition holds; the call as changed, or None when it did
    not change.

    Inside a write transaction the returned row is the arbiter: of two processes making the
    same change at once, exactly one gets the changed row back (RETURNING).
    """
    values["updated_at"] = utcnow()
    changed = list(
        Call.update(**values).where((Call.id == call_id) & condition).returning(Call).execute()
    )
    if changed and "status" in values:
        metrics.CALLS.labels(values["status"]).inc()
    return changed[0] if changed else None


def _by_provider_id(tenant_id: str, provider_call_id: str | None) -> Call | None:
    if provider_call_id is None:
        return None
    return Call.get_or_none(
        (Call.tenant == tenant_id) & (Call.provider_call_id == provider_call_id)
    )


def start_call(
    *,
    did: str,
    caller_number: str,
    direction: str = "inbound",
    provider_call_id: str | None = None,
    variables: dict[str, str] | None = None,
    agent_version: int | None = None,
) -> admission.StartedCall:
    """Record an incoming call and return it with its session, or Conflict no_agent,
    concurrency_limit or no_credits.

    The call is answered with the version of the number's agent that the number is pinned to,
    else its latest; agent_version, when given, overrides both (`flask calls simulate
    --version`), and must be one the agent has (ValidationFailed).

    A repeated provider_call_id (per tenant) returns the call recorded first (with the
    variables it was recorded with).
    """
    line = admission.find_line(did, agent_version)
    if line is None:
        raise Conflict(f"No tenant has the number {did}.", code="no_agent", details={})
    if agent_version is not None and line.active_agent_id and line.answering is None:
        missing = f"Agent {line.active_agent_id} has no version {agent_version}."
        raise ValidationFailed(missing, details={"agentVersion": [missing]})
    call = _by_provider_id(line.tenant_id, provider_call_id)
    if call is None:
        try:
            with transaction():
                call = admission.record_call(
                    line=line,
                    caller_number=caller_number,
                    direction=direction,
                    provider_call_id=provider_call_id,
                    variables=variables or {},
                )
        except pw.IntegrityError:
            # The unique (tenant, providerCallId) index: another request with the same id
            # committed first, so answer with its call.
            call = _by_provider_id(line.tenant_id, provider_call_id)
            if call is None:
                raise
        else:
            metrics.CALLS.labels(call.status).inc()
            if admission.is_rejected(call):
                raise admission.rejection_error(call)
            # The agent's version and the hold the call was recorded with.
            assert line.answering is not None  # else it was rejected
            session = admission.build_session(line.answering, call)
            return admission.StartedCall(call=call, session=session, created=True)
    if admission.is_rejected(call):
        raise admission.rejection_error(call)
    return admission.StartedCall(call=call, session=admission.session_for(call), created=False)


def answer_call(*, call_id: str, answered_at: datetime | None = None) -> Call:
    """ringing → answered, emitting call.answered; a repeat for an answered call changes nothing."""
    with transaction():
        when = answered_at or utcnow()
        call = _update_if(call_id, Call.status == "ringing", status="answered", answered_at=when)
        if call is None:
            call = _runtime_call(call_id)  # NotFound when there is no such call
            if call.status != "answered":
                raise _illegal(call, "answered")
            return call
        events.emit(
            tenant_id=call.tenant_id,
            type="call.answered",
            data={
                "callId": call.id,
                "agentId": call.agent_id,
                "startedAt": isoformat(call.started_at),
            },
            occurred_at=when,
        )
    return call


def _illegal(call: Call, target: str) -> Conflict:
    return Conflict(
        f"A call that is {call.status} cannot become {target}.",
        code="illegal_transition",
        details={"status": call.status},
    )


def _costs(ai_cost_idr: int | None, cost_breakdown: dict[str, int] | None) -> dict[str, Any]:
    """The cost columns of an ended call: aiCostIdr, and the breakdown when one was reported
    (a component left out is 0). With both, aiCostIdr must be the breakdown's sum; with only
    the breakdown, it is that sum."""
    if cost_breakdown is None:
        if ai_cost_idr is None:
            raise ValidationFailed(
                "Invalid value for aiCostIdr.",
                details={"aiCostIdr": ["Send aiCostIdr, costBreakdown or both."]},
            )
        return {"ai_cost_idr": ai_cost_idr}
    components = {name: cost_breakdown.get(name, 0) for name in COST_COMPONENTS}
    total = sum(components.values())
    if ai_cost_idr is not None and ai_cost_idr != total:
        raise ValidationFailed(
            "Invalid value for aiCostIdr.",
            details={"aiCostIdr": [f"Must equal the sum of costBreakdown ({total})."]},
        )
    if total > MAX_COST_IDR:
        raise ValidationFailed(
            "Invalid value for costBreakdown.",
            details={"costBreakdown": [f"The sum must be at most {MAX_COST_IDR:,}."]},
        )
    return {
        "ai_cost_idr": total,
        **{f"cost_{name}_idr": value for name, value in components.items()},
    }


def end_call(
    *,
    call_id: str,
    status: str,
    duration_seconds: int,
    talk_time_seconds: int,
    hangup_reason: str,
    hangup_initiator: str,
    ai_cost_idr: int | None = None,
    cost_breakdown: dict[str, int] | None = None,
    recording_url: str | None = None,
    ended_at: datetime | None = None,
    metadata: dict[str, Any] | None = None,
) -> Call:
    """End an open call, charge its minutes and emit call.ended (and credits.low), at once;
    free its hold and its concurrent-call slot.

    The AI cost is ai_cost_idr, cost_breakdown or both (see _costs). A repeat for a call
    already in that end status returns it unchanged and charges nothing.
    """
    costs = _costs(ai_cost_idr, cost_breakdown)
    with transaction():
        minutes = billing.usage_minutes(talk_time_seconds)
        values: dict[str, Any] = dict(
            status=status,
            ended_at=ended_at or utcnow(),
            duration_seconds=duration_seconds,
            talk_time_seconds=talk_time_seconds,
            hangup_reason=hangup_reason,
            hangup_initiator=hangup_initiator,
            billed_minutes=minutes,
            recording_url=recording_url,
            reservation_expires_at=None,  # the hold is released below
            **costs,
        )
        if metadata or ended_at:
            known = _runtime_call(call_id)
            if ended_at and ended_at < known.started_at:
                raise ValidationFailed(
                    "Invalid value for endedAt.",
                    details={"endedAt": ["Must not be before the call's start."]},
                )
        if metadata:
            # Merged with what the call holds; only the one changing UPDATE writes it.
            values["metadata"] = merged = {**known.metadata, **metadata}
            if metadata_bytes(merged) > MAX_METADATA_BYTES:
                raise ValidationFailed(
                    "Invalid value for metadata.",
                    details={
                        "metadata": [
                            f"Merged with the call's, at most {MAX_METADATA_BYTES:,} bytes "
                            "as compact JSON."
                        ]
                    },
                )
        call = _update_if(call_id, Call.status.in_(OPEN_STATUSES), **values)
        if call is None:
            call = _runtime_call(call_id)  # NotFound when there is no such call
            if call.hangup_reason == RUNTIME_LOST:
                raise Conflict(
                    "The call was closed as runtime_lost when its hold lapsed; its end is "
                    "no longer taken and nothing is charged.",
                    code="call_not_active",
                    details={"status": call.status, "hangupReason": RUNTIME_LOST},
                )
            if call.status == status:
                return call
            raise _illegal(call, status)
        events.emit(
            tenant_id=call.tenant_id,
            type="call.ended",
            data=admission.ended_data(call),
            occurred_at=call.ended_at,
        )
        billing.charge_call(
            tenant_id=call.tenant_id, call_id=call.id, minutes=minutes, held=call.reserved_minutes
        )
        campaign_progress.contact_done(call)
    return call


def release_lapsed_holds(limit: int = 500) -> int:
    """Close the calls still open long after their allowance (the runtime never reported
    their end) as failed with hangupReason runtime_lost, charging nothing, and free their
    holds and concurrent-call slots; how many were closed.

    Each closed call emits call.ended like any end. A late end for such a call answers 409
    call_not_active (end_call), so a lost runtime never overdraws a tenant.
    """
    now = utcnow()
    with transaction():
        query = (
            Call.select(Call.id, Call.started_at)
            .where(Call.reservation_expires_at < now)
            .order_by(Call.id)
            .limit(limit)
        )
        closed: list[Call] = []
        holds: dict[str, list[int]] = {}
        rows = cast(list[tuple[str, datetime]], list(query.tuples()))
        for call_id, started_at in rows:
            # Conditional, so of a call's end and of two sweepers, one closes the call.
            call = _update_if(
                call_id,
                (Call.reservation_expires_at < now) & Call.status.in_(OPEN_STATUSES),
                status="failed",
                ended_at=now,
                duration_seconds=max(0, int((now - started_at).total_seconds())),
                talk_time_seconds=0,
                billed_minutes=0,
                hangup_reason=RUNTIME_LOST,
                hangup_initiator="system",
                reservation_expires_at=None,
            )
            if call is None:
                continue
            closed.append(call)
            holds.setdefault(call.tenant_id, []).append(call.reserved_minutes)
            events.emit(
                tenant_id=call.tenant_id,
                type="call.ended",
                data=admission.ended_data(call),
                occurred_at=call.ended_at,
            )
            campaign_progress.contact_done(call)
        billing.release_holds(holds)
    return len(closed)


def _append_turns(call_id: str, turns: list[dict[str, Any]]) -> Call:
    """Append turns to the call's transcript, after the ones it holds; inside a transaction.

    One conditional UPDATE checks the limits against the call's counters and takes the
    turns' seqs: it locks the call row until commit, so posts at once append one after the
    other. A post that would take the call past a limit stores none of its turns.
    """
    size = sum(len(turn["text"].encode()) for turn in turns)
    taken = list(
        Call.update(
            turns_count=Call.turns_count + len(turns),
            turns_bytes=Call.turns_bytes + size,
            updated_at=utcnow(),
        )
        .where(
            (Call.id == call_id)
            & (Call.turns_count + len(turns) <= MAX_TURNS)
            & (Call.turns_bytes + size <= MAX_TURN_BYTES)
        )
        .returning(Call)
        .execute()
    )
    if not taken:
        call = _runtime_call(call_id)  # NotFound when there is no such call
        raise ValidationFailed(
            "Invalid value for turns.",
            details={
                "turns": [
                    f"A call's transcript holds at most {MAX_TURNS:,} turns and "
                    f"{MAX_TURN_BYTES:,} bytes of text; this one holds {call.turns_count:,} "
                    f"turns and {call.turns_bytes:,} bytes, and these {len(turns):,} turns "
                    f"({size:,} bytes) would take it past that. Nothing was stored."
                ]
            },
        )
    call = taken[0]
    first = call.turns_count - len(turns) + 1
    CallTurn.insert_many(
        [
            {
                "call": call_id,
                "seq": first + index,
                "role": turn["role"],
                "text": turn["text"],
                "start_ms": turn.get("start_ms"),
                "end_ms": turn.get("end_ms"),
            }
            for index, turn in enumerate(turns)
        ]
    ).execute()
    return call


def add_transcript(
    *,
    call_id: str,
    transcript_summary: str | None = None,
    turns: list[dict[str, Any]] | None = None,
) -> Call:
    """Append turns to the call's transcript and store its summary, in one transaction: a
    post that breaks a limit stores nothing. A new summary emits call.transcript; the same
    text again changes nothing."""
    with transaction():
        call = _append_turns(call_id, turns) if turns else None
        if transcript_summary is None:
            return call or _runtime_call(call_id)
        summarised = _update_if(
            call_id,
            Call.transcript_summary.is_null() | (Call.transcript_summary != transcript_summary),
            transcript_summary=transcript_summary,
        )
        if summarised is None:
            return call or _runtime_call(call_id)  # NotFound when there is no such call
        events.emit(
            tenant_id=summarised.tenant_id,
            type="call.transcript",
            data={"callId": summarised.id, "transcriptSummary": transcript_summary},
        )
    return summarised


# Outbound calls: queued by a tenant (or a campaign), then claimed by a runtime (dispatch),
# which admits each exactly as an inbound start is admitted.
#
# Lock order, so that no two transactions wait on each other on PostgreSQL: a tenant's row
# before its campaigns' rows (every step that ends a call locks the tenant first: its event
# takes the tenant's seq). Dispatch takes its queued calls and then their tenants with SKIP
# LOCKED, so it never waits: a call whose tenant is busy stays queued for the next claim.


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
    """Queue an outbound call for a runtime to claim (dispatch); 409 no_agent or no_credits."""
    number, agent = outbound_line(tenant=tenant, phone_number_id=phone_number_id, agent_id=agent_id)
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
        call = _update_if(
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


def _answering_version(call_id: str) -> AgentVersion | None:
    """The version of the agent that talks in a queued call, chosen as for an inbound start:
    the number's pinned version when the call's agent is the number's, else the agent's
    latest; None when the agent (or the number the call is placed from) can no longer take
    calls."""
    row = (
        Call.select(Agent.id, Agent.version, PhoneNumber.agent, PhoneNumber.agent_version)
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
        return None
    agent_id, latest, number_agent_id, pinned = row
    wanted = pinned if number_agent_id == agent_id and pinned is not None else latest
    return cast(
        AgentVersion | None,
        AgentVersion.get_or_none(
            (AgentVersion.agent == agent_id) & (AgentVersion.version == wanted)
        ),
    )


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


def dispatch(*, max_calls: int) -> list[admission.StartedCall]:
    """Claim up to max_calls queued calls, oldest first, for a runtime: each is admitted as an
    inbound start is (credit hold, a concurrent-call slot, ringing, call.started) and
    returned with its session. A call whose tenant is at its concurrency limit stays queued;
    one whose tenant has no credit left (or whose agent can no longer answer) fails, as a
    start would, with no_credits (or no_agent).

    Two runtimes claiming at once never get the same call: on PostgreSQL the candidates are
    locked with SKIP LOCKED (another claim takes others), and every claim is a conditional
    UPDATE of a queued call (on SQLite the IMMEDIATE transaction runs claims one at a time).
    """
    now = utcnow()
    claimed: list[admission.StartedCall] = []
    with transaction():
        candidates = (
            Call.select(Call.id, Call.tenant)
            .join(Tenant, on=(Tenant.id == Call.tenant))
            .where(
                (Call.status == "queued")
                & (Tenant.active_calls < tenant_service.concurrent_call_limit_sql())
            )
            .order_by(Call.queued_at, Call.id)
            .limit(max_calls * 2)
        )
        if not is_sqlite():
            candidates = candidates.for_update(of=Call, skip_locked=True)
        rows = cast(list[tuple[str, str]], list(candidates.tuples()))
        tenants = _lock_tenants({tenant_id for _, tenant_id in rows})
        for call_id, tenant_id in rows:
            if len(claimed) >= max_calls:
                break
            if tenant_id not in tenants:
                continue  # another transaction holds the tenant: the next claim takes it
            state = tenants[tenant_id]
            balance, reserved, active, limit = state
            if active >= limit:
                continue  # stays queued until one of the tenant's calls ends
            agent = _answering_version(call_id)
            held, rejection = admission.decide(
                agent=agent, balance=balance, reserved=reserved, active=active, limit=limit
            )
            values: dict[str, Any] = dict(
                status="failed" if rejection else "ringing",
                started_at=now,
                agent_version=agent.version if agent else None,
                reserved_minutes=held,
                reservation_expires_at=admission.hold_expiry(now, held),
                **(admission.rejected_values(rejection, now) if rejection else {}),
            )
            call = _update_if(call_id, Call.status == "queued", **values)
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
            assert agent is not None  # else it was rejected
            claimed.append(
                admission.StartedCall(
                    call=call, session=admission.build_session(agent, call), created=True
                )
            )
    return claimed
