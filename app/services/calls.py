"""Calls: the lifecycle the voice runtime reports, and the call history tenants read.

Every step changes the call, charges credits and writes its events in one transaction.
Steps that must happen once (answering, ending) are conditional UPDATEs on the status, so
two processes reporting the same step at once change and charge the call exactly once.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import peewee as pw

from app import metrics, queue
from app.db import select_rows
from app.errors import Conflict, NotFound
from app.models import Agent, Call, Function, PhoneNumber, Tenant
from app.services import billing, events
from app.services.pages import Page, bounded_count
from app.util import isoformat, new_id, utcnow

STATUSES = ("ringing", "answered", "ended", "dropped", "failed")
END_STATUSES = ("ended", "dropped", "failed")
OPEN_STATUSES = ("ringing", "answered")
DIRECTIONS = ("inbound", "outbound")
REJECTIONS = ("no_agent", "no_credits")


@dataclass(frozen=True)
class StartedCall:
    call: Call
    session: dict[str, Any]
    created: bool  # False when a repeated providerCallId returned the existing call


def _runtime_call(call_id: str) -> Call:
    """A call by id, for the runtime, which reports calls of every tenant."""
    call = Call.find(call_id)
    if call is None:
        raise NotFound(f"Call {call_id} not found.")
    return call


def _update_if(call_id: str, condition: pw.Expression, **values: Any) -> tuple[bool, Call]:
    """UPDATE the call only where condition holds; return whether it did, and the call now.

    Inside a write transaction the row count is the arbiter: of two processes making the
    same change at once, exactly one sees a changed row.
    """
    changed = (
        Call.update(updated_at=utcnow(), **values).where((Call.id == call_id) & condition).execute()
    )
    if changed and "status" in values:
        metrics.CALLS.labels(values["status"]).inc()
    return bool(changed), _runtime_call(call_id)  # NotFound when there is no such call


def _by_provider_id(tenant_id: str, provider_call_id: str | None) -> Call | None:
    if provider_call_id is None:
        return None
    return Call.get_or_none(
        (Call.tenant == tenant_id) & (Call.provider_call_id == provider_call_id)
    )


def _answering_agent(number: PhoneNumber) -> Agent | None:
    if not number.is_active or number.agent_id is None:
        return None
    return Agent.get_or_none(
        (Agent.id == number.agent_id) & Agent.is_active & Agent.deleted_at.is_null()
    )


def _rejected(call: Call) -> bool:
    """Whether the call was turned away at its start (no agent, no credits)."""
    return (
        call.status == "failed"
        and call.answered_at is None
        and call.hangup_reason in REJECTIONS
        and call.hangup_initiator == "system"
    )


def _rejection(call: Call) -> Conflict:
    if call.hangup_reason == "no_agent":
        message = "No active agent answers this number; the call was recorded as failed."
    else:
        message = "The tenant has no credit minutes left; the call was recorded as failed."
    return Conflict(message, code=call.hangup_reason, details={"callId": call.id})


def _ended_data(call: Call) -> dict[str, Any]:
    return {
        "callId": call.id,
        "durationSeconds": call.duration_seconds,
        "hangupReason": call.hangup_reason,
        "phoneNumberId": call.phone_number_id,
        "callerNumber": call.caller_number,
        "calleeNumber": call.callee_number,
        "talkTimeSeconds": call.talk_time_seconds,
        "hangupInitiator": call.hangup_initiator,
        "aiCostIdr": call.ai_cost_idr,
    }


def _record_call(
    *, number: PhoneNumber, caller_number: str, direction: str, provider_call_id: str | None
) -> Call:
    """Insert the call (ringing, or failed when nobody can take it); inside a transaction."""
    # The UPDATE takes the tenant row's lock, so the balance read below is current.
    Tenant.update(calls_count=Tenant.calls_count + 1).where(Tenant.id == number.tenant_id).execute()
    balance = Tenant.select(Tenant.balance_minutes).where(Tenant.id == number.tenant_id).scalar()
    agent = _answering_agent(number)
    rejection = "no_agent" if agent is None else ("no_credits" if balance <= 0 else None)
    now = utcnow()
    # For an outbound call the business number is the caller and callerNumber the callee.
    caller, callee = (
        (caller_number, number.display_number)
        if direction == "inbound"
        else (number.display_number, caller_number)
    )
    call = Call.create(
        id=new_id("call"),
        tenant=number.tenant_id,
        phone_number=number.id,
        agent=agent.id if agent else number.agent_id,
        provider_call_id=provider_call_id,
        caller_number=caller,
        callee_number=callee,
        direction=direction,
        status="failed" if rejection else "ringing",
        started_at=now,
        updated_at=now,
        **(
            dict(
                ended_at=now,
                duration_seconds=0,
                talk_time_seconds=0,
                hangup_reason=rejection,
                hangup_initiator="system",
                ai_cost_idr=0,
                billed_minutes=0,
            )
            if rejection
            else {}
        ),
    )
    metrics.CALLS.labels(call.status).inc()

    events.emit(
        tenant_id=number.tenant_id,
        type="call.started",
        data={
            "callId": call.id,
            "phoneNumberId": number.id,
            "callerNumber": caller_number,
            "did": number.display_number,
        },
        occurred_at=now,
    )
    if rejection:
        events.emit(
            tenant_id=number.tenant_id, type="call.ended", data=_ended_data(call), occurred_at=now
        )
    return call


def session_for(call: Call) -> dict[str, Any]:
    """What the runtime needs to run the call: the agent's configuration and time limit."""
    agent = Agent.find(call.agent_id)
    if agent is None:
        raise Conflict("The call has no agent.", code="no_agent", details={"callId": call.id})
    balance = Tenant.select(Tenant.balance_minutes).where(Tenant.id == call.tenant_id).scalar()
    functions = (
        Function.select(Function.name, Function.description, Function.parameters)
        .where(Function.agent == agent.id)
        .order_by(Function.name)
    )
    return {
        "agent_id": agent.id,
        "system_prompt": agent.system_prompt,
        "voice_id": agent.voice_id,
        "greeting_text": agent.greeting_text,
        "language": agent.language,
        "escalation_number": agent.escalation_number,
        "tools_enabled": agent.tools_enabled,
        "functions": list(functions),
        "max_call_duration_seconds": max(
            0, min(agent.max_call_duration_minutes * 60, balance * 60)
        ),
    }


def start_call(
    *,
    did: str,
    caller_number: str,
    direction: str = "inbound",
    provider_call_id: str | None = None,
) -> StartedCall:
    """Record an incoming call and return it with its session, or Conflict no_agent/no_credits.

    A repeated provider_call_id (per tenant) returns the call recorded first.
    """
    number = PhoneNumber.get_or_none(PhoneNumber.display_number == did)
    if number is None:
        raise Conflict(f"No tenant has the number {did}.", code="no_agent", details={})
    call = _by_provider_id(number.tenant_id, provider_call_id)
    created = False
    if call is None:
        try:
            with queue.transaction():
                call = _by_provider_id(number.tenant_id, provider_call_id)
                if call is None:
                    call = _record_call(
                        number=number,
                        caller_number=caller_number,
                        direction=direction,
                        provider_call_id=provider_call_id,
                    )
                    created = True
        except pw.IntegrityError:
            # Another request with the same providerCallId committed first: answer with its call.
            call = _by_provider_id(number.tenant_id, provider_call_id)
            if call is None:
                raise
            created = False
    if _rejected(call):
        raise _rejection(call)
    return StartedCall(call=call, session=session_for(call), created=created)


def answer_call(*, call_id: str, answered_at: datetime | None = None) -> Call:
    """ringing → answered, emitting call.answered; a repeat for an answered call changes nothing."""
    with queue.transaction():
        when = answered_at or utcnow()
        changed, call = _update_if(
            call_id, Call.status == "ringing", status="answered", answered_at=when
        )
        if changed:
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
        elif call.status != "answered":
            raise _illegal(call, "answered")
    return call


def _illegal(call: Call, target: str) -> Conflict:
    return Conflict(
        f"A call that is {call.status} cannot become {target}.",
        code="illegal_transition",
        details={"status": call.status},
    )


def end_call(
    *,
    call_id: str,
    status: str,
    duration_seconds: int,
    talk_time_seconds: int,
    hangup_reason: str,
    hangup_initiator: str,
    ai_cost_idr: int,
    ended_at: datetime | None = None,
    metadata: dict[str, Any] | None = None,
) -> Call:
    """End an open call, charge its minutes and emit call.ended (and credits.low), at once.

    A repeat for a call already in that end status returns it unchanged and charges nothing.
    """
    with queue.transaction():
        minutes = billing.usage_minutes(talk_time_seconds)
        changed, call = _update_if(
            call_id,
            Call.status.in_(OPEN_STATUSES),
            status=status,
            ended_at=ended_at or utcnow(),
            duration_seconds=duration_seconds,
            talk_time_seconds=talk_time_seconds,
            hangup_reason=hangup_reason,
            hangup_initiator=hangup_initiator,
            ai_cost_idr=ai_cost_idr,
            # Merged with what the call holds; only the one changing UPDATE writes it.
            metadata={**_runtime_call(call_id).metadata, **(metadata or {})},
            billed_minutes=minutes,
        )
        if not changed:
            if call.status == status:
                return call
            raise _illegal(call, status)
        events.emit(
            tenant_id=call.tenant_id,
            type="call.ended",
            data=_ended_data(call),
            occurred_at=call.ended_at,
        )
        billing.charge_call(tenant_id=call.tenant_id, call_id=call.id, minutes=minutes)
    return call


def add_transcript(*, call_id: str, transcript_summary: str) -> Call:
    """Store the call's summary and emit call.transcript; the same text again changes nothing."""
    with queue.transaction():
        changed, call = _update_if(
            call_id,
            Call.transcript_summary.is_null() | (Call.transcript_summary != transcript_summary),
            transcript_summary=transcript_summary,
        )
        if changed:
            events.emit(
                tenant_id=call.tenant_id,
                type="call.transcript",
                data={"callId": call.id, "transcriptSummary": transcript_summary},
            )
    return call


def _tenant_calls(tenant: Tenant) -> "pw.ModelSelect[Call]":
    """The one place tenant code selects calls: always scoped to the tenant."""
    return Call.select().where(Call.tenant == tenant)


def get_call(*, tenant: Tenant, call_id: str) -> Call:
    """The tenant's call, or NotFound (also for another tenant's call)."""
    call = _tenant_calls(tenant).where(Call.id == call_id).first()
    if call is None:
        raise NotFound(f"Call {call_id} not found.")
    return call


# The list's columns, in CallSchema's order; the list reads nothing else.
LIST_COLUMNS = (
    "id, phone_number_id, agent_id, caller_number, callee_number, direction, status, "
    "started_at, ended_at, duration_seconds, talk_time_seconds, hangup_reason, "
    "transcript_summary, ai_cost_idr, metadata"
)
# Each filter's condition; every combination with tenant_id leads an index of the call table.
LIST_FILTERS = {
    "status": "status = ?",
    "agent_id": "agent_id = ?",
    "phone_number_id": "phone_number_id = ?",
    "direction": "direction = ?",
    "from_": "started_at >= ?",
    "to": "started_at < ?",
}


def list_calls(
    *,
    tenant: Tenant,
    limit: int,
    offset: int,
    status: str | None = None,
    from_: datetime | None = None,
    to: datetime | None = None,
    agent_id: str | None = None,
    phone_number_id: str | None = None,
    direction: str | None = None,
) -> Page:
    """Calls newest first. Unfiltered, total is the maintained count; filtered, it is bounded.

    Fixed SQL and plain rows (db.select_rows): building the query and 50 model instances
    cost more CPU than the rest of the request.
    """
    given = {
        "status": status,
        "agent_id": agent_id,
        "phone_number_id": phone_number_id,
        "direction": direction,
        "from_": from_ and Call.started_at.db_value(from_),
        "to": to and Call.started_at.db_value(to),
    }
    filters = {name: value for name, value in given.items() if value is not None}
    where = " AND ".join(["tenant_id = ?", *(LIST_FILTERS[name] for name in filters)])
    params = [tenant.id, *filters.values()]
    rows = select_rows(
        Call,
        f"SELECT {LIST_COLUMNS} FROM call WHERE {where} "
        "ORDER BY started_at DESC, id DESC LIMIT ? OFFSET ?",
        [*params, limit + 1, offset],
    )
    if filters:
        total = bounded_count(f"SELECT 1 FROM call WHERE {where}", params)
    else:
        total = Tenant.select(Tenant.calls_count).where(Tenant.id == tenant.id).scalar()
    return Page(
        items=rows[:limit], total=total, limit=limit, offset=offset, has_more=len(rows) > limit
    )
