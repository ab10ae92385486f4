"""Calls: the lifecycle the voice runtime reports, and the call history tenants read.

Every step changes the call, charges credits and writes its events in one transaction.
Steps that must happen once (answering, ending) are conditional UPDATEs on the status, so
two processes reporting the same step at once change and charge the call exactly once.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import peewee as pw

from app import metrics, queue
from app.db import database, insert_rows, model_rows, raw_sql, select_rows
from app.errors import Conflict, NotFound
from app.models import Agent, Call, Function, Tenant
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


@dataclass(frozen=True)
class _Line:
    """A provisioned number as a new call needs it, read in one query (NUMBER_SQL)."""

    id: str
    tenant_id: str
    display_number: str
    agent_id: str | None  # the assigned agent, also when it cannot answer
    agent: Agent | None  # the agent that answers: None when the number or agent is inactive
    functions: list[dict[str, Any]]  # the answering agent's, by name


# The lifecycle runs fixed SQL (see db.insert_rows): each runtime request runs a handful of
# statements, and compiling peewee's queries cost more CPU than running them.

# The number, the agent that answers it (an active number's active, undeleted agent) and
# that agent's functions: one row per function, or one row without when it has none.
NUMBER_SQL = (
    "SELECT n.id, n.tenant_id, n.agent_id, a.id, a.system_prompt, a.voice_id, "
    "a.greeting_text, a.language, a.escalation_number, a.tools_enabled, "
    "a.max_call_duration_minutes, f.name, f.description, f.parameters "
    "FROM phone_number n "
    "LEFT JOIN agent a ON a.id = n.agent_id AND n.is_active AND a.is_active "
    "AND a.deleted_at IS NULL "
    'LEFT JOIN "function" f ON f.agent_id = a.id '
    "WHERE n.display_number = ? ORDER BY f.name"
)
# Counts the call; the UPDATE takes the tenant row's lock, so the balance it returns is current.
COUNT_CALL_SQL = (
    "UPDATE tenant SET calls_count = calls_count + 1 WHERE id = ? RETURNING balance_minutes"
)
# A repeated providerCallId's call (the unique index of tenant_id, provider_call_id).
PROVIDER_CALL_SQL = 'SELECT * FROM "call" WHERE tenant_id = ? AND provider_call_id = ?'


def _line(did: str) -> _Line | None:
    """The number did with its answering agent and functions, or None when nobody has it."""
    rows = database.execute_sql(raw_sql(NUMBER_SQL), (did,)).fetchall()
    if not rows:
        return None
    number_id, tenant_id, assigned_id, agent_id, *agent_fields = rows[0][:11]
    agent = None
    if agent_id is not None:
        prompt, voice, greeting, language, escalation, tools, max_minutes = agent_fields
        agent = Agent(
            id=agent_id,
            system_prompt=prompt,
            voice_id=voice,
            greeting_text=greeting,
            language=language,
            escalation_number=escalation,
            tools_enabled=Agent.tools_enabled.python_value(tools),
            max_call_duration_minutes=max_minutes,
        )
    parameters = Function.parameters.python_value
    functions = [
        {"name": name, "description": description, "parameters": parameters(schema)}
        for *_, name, description, schema in rows
        if name is not None
    ]
    return _Line(number_id, tenant_id, did, assigned_id, agent, functions)


def _runtime_call(call_id: str) -> Call:
    """A call by id, for the runtime, which reports calls of every tenant."""
    call = Call.find(call_id)
    if call is None:
        raise NotFound(f"Call {call_id} not found.")
    return call


def _update_if(call_id: str, condition: str, params: Sequence[Any], **values: Any) -> Call | None:
    """UPDATE the call only where condition (SQL with ? for params) holds; the call as
    changed, or None when it did not change.

    Inside a write transaction the returned row is the arbiter: of two processes making the
    same change at once, exactly one gets the changed row back (RETURNING).
    """
    values["updated_at"] = utcnow()
    fields = Call._meta.fields  # type: ignore[attr-defined]
    assignments = ", ".join(f'"{fields[name].column_name}" = ?' for name in values)
    sql = f'UPDATE "call" SET {assignments} WHERE "id" = ? AND ({condition}) RETURNING *'
    converted = [fields[name].db_value(value) for name, value in values.items()]
    changed = model_rows(Call, sql, [*converted, call_id, *params])
    if changed and "status" in values:
        metrics.CALLS.labels(values["status"]).inc()
    return changed[0] if changed else None


def _by_provider_id(tenant_id: str, provider_call_id: str | None) -> Call | None:
    if provider_call_id is None:
        return None
    rows = model_rows(Call, PROVIDER_CALL_SQL, [tenant_id, provider_call_id])
    return rows[0] if rows else None


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
    *, line: _Line, caller_number: str, direction: str, provider_call_id: str | None
) -> tuple[Call, int]:
    """Insert the call (ringing, or failed when nobody can take it); inside a transaction.

    Returns the call and the tenant's balance when it was recorded.
    """
    now = utcnow()
    call_id = new_id("call")
    events.emit(
        tenant_id=line.tenant_id,
        type="call.started",
        data={
            "callId": call_id,
            "phoneNumberId": line.id,
            "callerNumber": caller_number,
            "did": line.display_number,
        },
        occurred_at=now,
    )
    # Last, since the tenant row's lock is held until commit: concurrent calls of the tenant
    # wait on it for as short a time as possible.
    (balance,) = database.execute_sql(raw_sql(COUNT_CALL_SQL), (line.tenant_id,)).fetchone()
    agent = line.agent
    rejection = "no_agent" if agent is None else ("no_credits" if balance <= 0 else None)
    # For an outbound call the business number is the caller and callerNumber the callee.
    caller, callee = (
        (caller_number, line.display_number)
        if direction == "inbound"
        else (line.display_number, caller_number)
    )
    call = Call(
        id=call_id,
        tenant=line.tenant_id,
        phone_number=line.id,
        agent=agent.id if agent else line.agent_id,
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
    insert_rows([call])
    if rejection:
        events.emit(
            tenant_id=line.tenant_id, type="call.ended", data=_ended_data(call), occurred_at=now
        )
    return call, balance


def _session(agent: Agent, functions: list[Any], balance: int) -> dict[str, Any]:
    return {
        "agent_id": agent.id,
        "system_prompt": agent.system_prompt,
        "voice_id": agent.voice_id,
        "greeting_text": agent.greeting_text,
        "language": agent.language,
        "escalation_number": agent.escalation_number,
        "tools_enabled": agent.tools_enabled,
        "functions": functions,
        "max_call_duration_seconds": max(
            0, min(agent.max_call_duration_minutes * 60, balance * 60)
        ),
    }


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
    return _session(agent, list(functions), balance)


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
    line = _line(did)
    if line is None:
        raise Conflict(f"No tenant has the number {did}.", code="no_agent", details={})
    call = _by_provider_id(line.tenant_id, provider_call_id)
    if call is None:
        try:
            with queue.transaction():
                call, balance = _record_call(
                    line=line,
                    caller_number=caller_number,
                    direction=direction,
                    provider_call_id=provider_call_id,
                )
        except pw.IntegrityError:
            # The unique (tenant, providerCallId) index: another request with the same id
            # committed first, so answer with its call.
            call = _by_provider_id(line.tenant_id, provider_call_id)
            if call is None:
                raise
        else:
            metrics.CALLS.labels(call.status).inc()
            if _rejected(call):
                raise _rejection(call)
            # The agent, functions and balance the call was recorded with.
            assert line.agent is not None  # else it was rejected
            session = _session(line.agent, line.functions, balance)
            return StartedCall(call=call, session=session, created=True)
    if _rejected(call):
        raise _rejection(call)
    return StartedCall(call=call, session=session_for(call), created=False)


def answer_call(*, call_id: str, answered_at: datetime | None = None) -> Call:
    """ringing → answered, emitting call.answered; a repeat for an answered call changes nothing."""
    with queue.transaction():
        when = answered_at or utcnow()
        call = _update_if(call_id, "status = ?", ["ringing"], status="answered", answered_at=when)
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
        values: dict[str, Any] = dict(
            status=status,
            ended_at=ended_at or utcnow(),
            duration_seconds=duration_seconds,
            talk_time_seconds=talk_time_seconds,
            hangup_reason=hangup_reason,
            hangup_initiator=hangup_initiator,
            ai_cost_idr=ai_cost_idr,
            billed_minutes=minutes,
        )
        if metadata:
            # Merged with what the call holds; only the one changing UPDATE writes it.
            values["metadata"] = {**_runtime_call(call_id).metadata, **metadata}
        call = _update_if(call_id, "status IN (?, ?)", OPEN_STATUSES, **values)
        if call is None:
            call = _runtime_call(call_id)  # NotFound when there is no such call
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
        call = _update_if(
            call_id,
            "transcript_summary IS NULL OR transcript_summary <> ?",
            [transcript_summary],
            transcript_summary=transcript_summary,
        )
        if call is None:
            return _runtime_call(call_id)  # NotFound when there is no such call
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
        # A call's agent, number, direction and start never change: only its status does.
        only_grows = "status" not in filters
        total = bounded_count(f"SELECT 1 FROM call WHERE {where}", params, only_grows=only_grows)
    else:
        # The maintained count, read with fixed SQL: compiling the peewee query cost ten
        # times more than running it.
        sql = "SELECT calls_count FROM tenant WHERE id = ?"
        total = select_rows(Tenant, sql, [tenant.id])[0].calls_count
    return Page(
        items=rows[:limit], total=total, limit=limit, offset=offset, has_more=len(rows) > limit
    )
