"""The lifecycle the voice runtime reports: a call's start, answer, transcript and end, and
the sweep that closes the calls whose runtime never reported their end.

Every step changes the call, charges credits and writes its events in one transaction.
Steps that must happen once (answering, ending) are conditional UPDATEs on the status, so
two processes reporting the same step at once change and charge the call exactly once.
"""

from datetime import datetime, timedelta
from typing import Any, cast

import peewee as pw

from app import metrics
from app.db import transaction
from app.errors import Conflict, NotFound, ValidationFailed
from app.models import Call, CallTurn
from app.services import billing, campaign_progress, events
from app.services.calls import admission
from app.services.calls import analysis as call_analysis
from app.services.calls.constants import (
    COST_COMPONENTS,
    DURATION_ALLOWANCE_SECONDS,
    MAX_COST_IDR,
    MAX_METADATA_BYTES,
    MAX_TURN_BYTES,
    MAX_TURNS,
    OPEN_STATUSES,
    metadata_bytes,
)
from app.util import isoformat, utcnow

# The hangupReason of a call closed because its runtime never reported its end.
RUNTIME_LOST = "runtime_lost"


def _runtime_call(call_id: str) -> Call:
    """A call by id, for the runtime, which reports calls of every tenant."""
    call = Call.get_or_none(Call.id == call_id)
    if call is None:
        raise NotFound(f"Call {call_id} not found.")
    return call


def update_if(call_id: str, condition: pw.Expression, **values: Any) -> Call | None:
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
    started_at: datetime | None = None,
) -> admission.StartedCall:
    """Record an incoming call and return it with its session, or Conflict no_agent,
    concurrency_limit or no_credits.

    The call is answered with the version of the number's agent that the number is pinned to,
    else its latest; agent_version, when given, overrides both (`flask calls simulate
    --version`), and must be one the agent has (ValidationFailed). started_at, when given,
    is when the call started, for a call simulated after the fact (`flask calls simulate`);
    its credit hold still runs from now.

    A repeated provider_call_id (per tenant) returns the call recorded first (with the
    variables it was recorded with). Variables that would fill the session past its size are
    refused (ValidationFailed), and nothing is recorded.
    """
    line = admission.find_line(did, agent_version)
    if line is None:
        raise Conflict(f"No tenant has the number {did}.", code="no_agent", details={})
    if agent_version is not None and line.active_agent_id and line.answering is None:
        missing = f"Agent {line.active_agent_id} has no version {agent_version}."
        raise ValidationFailed(missing, details={"agentVersion": [missing]})
    if variables and line.answering is not None:
        admission.check_session_size(
            line.answering.system_prompt, line.answering.greeting_text, variables
        )
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
                    started_at=started_at,
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
        call = update_if(call_id, Call.status == "ringing", status="answered", answered_at=when)
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


def _too_long(call: Call, duration_seconds: int, now: datetime) -> ValidationFailed:
    """The error for a duration longer than the open call has lived (plus the allowance)."""
    age = max(0, int((now - call.started_at).total_seconds()))
    most = age + DURATION_ALLOWANCE_SECONDS
    return ValidationFailed(
        "Invalid value for durationSeconds.",
        details={
            "durationSeconds": [
                f"Must be at most the time since the call started plus "
                f"{DURATION_ALLOWANCE_SECONDS} s: it started {age:,} s ago, so at most "
                f"{most:,} (got {duration_seconds:,})."
            ]
        },
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

    The AI cost is ai_cost_idr, cost_breakdown or both (see _costs). duration_seconds may be
    at most the call's age on the service's clock plus DURATION_ALLOWANCE_SECONDS
    (ValidationFailed, nothing changed). A repeat for a call already in that end status
    returns it unchanged and charges nothing.
    """
    costs = _costs(ai_cost_idr, cost_breakdown)
    with transaction():
        now = utcnow()
        minutes = billing.usage_minutes(talk_time_seconds)
        values: dict[str, Any] = dict(
            status=status,
            ended_at=ended_at or now,
            duration_seconds=duration_seconds,
            talk_time_seconds=talk_time_seconds,
            hangup_reason=hangup_reason,
            hangup_initiator=hangup_initiator,
            billed_minutes=minutes,
            recording_url=recording_url,
            reservation_expires_at=None,  # the hold is released below
            **costs,
            **call_analysis.end_values(now),
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
        # The call started long enough ago for its duration, checked in the same UPDATE.
        latest_start = now - timedelta(seconds=duration_seconds - DURATION_ALLOWANCE_SECONDS)
        call = update_if(
            call_id,
            Call.status.in_(OPEN_STATUSES) & (Call.started_at <= latest_start),
            **values,
        )
        if call is None:
            call = _runtime_call(call_id)  # NotFound when there is no such call
            if call.hangup_reason == RUNTIME_LOST:
                raise Conflict(
                    "The call was closed as runtime_lost when its hold lapsed; its end is "
                    "no longer taken and nothing is charged.",
                    code="call_not_active",
                    details={"status": call.status, "hangupReason": RUNTIME_LOST},
                )
            if call.status in OPEN_STATUSES:
                raise _too_long(call, duration_seconds, now)
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
    call_analysis.after_end(call)
    return call


def release_lapsed_holds(limit: int = 500) -> int:
    """Close the calls still open long after their allowance (the runtime never reported
    their end) as failed with hangupReason runtime_lost, charging nothing, and free their
    holds and concurrent-call slots; how many were closed.

    Each closed call emits call.ended like any end, and one with turns is analysed like any
    other. A late end for such a call answers 409 call_not_active (end_call), so a lost
    runtime never overdraws a tenant.
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
            call = update_if(
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
                **call_analysis.end_values(now),
            )
            if call is None:
                continue
            closed.append(call)
            call_analysis.after_end(call)
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
        summarised = update_if(
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
