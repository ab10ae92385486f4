"""The call history tenants read: one call, its transcript, the list and the daily totals."""

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any, cast

import peewee as pw

from app.errors import NotFound
from app.models import Call, CallTurn, Tenant
from app.services.pages import Page, bounded_count
from app.util import utcnow


def _tenant_calls(tenant: Tenant) -> "pw.ModelSelect[Call]":
    """The one place tenant code selects calls: always scoped to the tenant."""
    return Call.select().where(Call.tenant == tenant)


def get_call(*, tenant: Tenant, call_id: str) -> Call:
    """The tenant's call, or NotFound (also for another tenant's call)."""
    call = _tenant_calls(tenant).where(Call.id == call_id).first()
    if call is None:
        raise NotFound(f"Call {call_id} not found.")
    return call


@dataclass(frozen=True)
class Transcript:
    call_id: str
    transcript_summary: str | None
    turns: list[dict[str, Any]]  # seq, role, text, start_ms, end_ms; in seq order


def get_transcript(*, tenant: Tenant, call_id: str) -> Transcript:
    """The tenant's call's summary and turns in order, or NotFound: two reads, the turns one
    range of their primary key (call, seq)."""
    found = (
        Call.select(Call.id, Call.transcript_summary)
        .where((Call.tenant == tenant) & (Call.id == call_id))
        .tuples()
        .first()
    )
    if found is None:
        raise NotFound(f"Call {call_id} not found.")
    turns = (
        CallTurn.select(
            CallTurn.seq, CallTurn.role, CallTurn.text, CallTurn.start_ms, CallTurn.end_ms
        )
        .where(CallTurn.call == call_id)
        .order_by(CallTurn.seq)
        .dicts()
    )
    return Transcript(
        call_id=found[0],
        transcript_summary=found[1],
        turns=cast(list[dict[str, Any]], list(turns)),
    )


# The list reads CallSchema's columns only, as plain dicts (no model instance per row), and
# billed_minutes, which the dashboard's list shows.
LIST_COLUMNS = (
    Call.id,
    Call.phone_number.alias("phone_number_id"),
    Call.agent.alias("agent_id"),
    Call.caller_number,
    Call.callee_number,
    Call.direction,
    Call.status,
    Call.started_at,
    Call.ended_at,
    Call.duration_seconds,
    Call.talk_time_seconds,
    Call.hangup_reason,
    Call.transcript_summary,
    Call.ai_cost_idr,
    Call.metadata,
    Call.billed_minutes,
    Call.agent_version,
    Call.successful,
)


def _caller_condition(number: str) -> pw.Expression:
    """Calls from number, or with a trailing *, from numbers that start with the rest: a range
    from the prefix to the next prefix of the same length, which an index answers (LIKE would
    not, with SQLite's case-insensitive LIKE or PostgreSQL's collations)."""
    if not number.endswith("*"):
        return Call.caller_number == number
    prefix = number[:-1]
    stem = prefix.rstrip("9")  # +6289* ends before +629; +99* has no end among numbers
    condition = Call.caller_number >= prefix
    if stem and stem[-1].isdigit():
        condition &= Call.caller_number < stem[:-1] + str(int(stem[-1]) + 1)
    return condition


def list_calls(
    *,
    tenant: Tenant,
    limit: int,
    offset: int,
    status: str | None = None,
    from_: datetime | None = None,
    to: datetime | None = None,
    agent_id: str | None = None,
    agent_version: int | None = None,
    phone_number_id: str | None = None,
    direction: str | None = None,
    caller_number: str | None = None,
    successful: bool | None = None,
) -> Page:
    """Calls newest first, as dicts of CallSchema's fields. Unfiltered, total is the
    maintained count; filtered, it is bounded. caller_number: a number, or the start of
    numbers followed by * (a range of the (tenant, caller_number) index). agent_version
    (a version of agent_id, given with it) leads the (tenant, agent, agent_version) index;
    successful (the verdict of a done analysis) the (tenant, successful) one.

    Every combination of filters with the tenant leads an index of the call table.
    """
    condition = Call.tenant == tenant
    filters = [
        (status, Call.status == status),
        (agent_id, Call.agent == agent_id),
        (agent_version, Call.agent_version == agent_version),
        (phone_number_id, Call.phone_number == phone_number_id),
        (direction, Call.direction == direction),
        (caller_number, caller_number and _caller_condition(caller_number)),
        (successful, Call.successful == successful),
        (from_, Call.started_at >= from_),
        (to, Call.started_at < to),
    ]
    filtered = False
    for value, test in filters:
        if value is not None:
            condition &= test
            filtered = True
    query = Call.select(*LIST_COLUMNS).where(condition)
    page = query.order_by(Call.started_at.desc(), Call.id.desc()).limit(limit + 1).offset(offset)
    rows = list(page.dicts())
    if filtered:
        total = bounded_count(query)
    else:
        total = Tenant.select(Tenant.calls_count).where(Tenant.id == tenant.id).scalar()
    return Page(
        items=rows[:limit], total=total, limit=limit, offset=offset, has_more=len(rows) > limit
    )


@dataclass(frozen=True)
class DayTotal:
    """One UTC day of a tenant's calls: how many started, were answered, and minutes billed."""

    day: date
    calls: int
    answered: int
    minutes: int


def daily_totals(*, tenant: Tenant, days: int = 30) -> list[DayTotal]:
    """The last days UTC days (today last), a DayTotal each, days without calls as zeros.

    One query over the (tenant, started_at) index range, grouped by the day: date() is a
    function on SQLite and PostgreSQL alike (SQLite answers text, PostgreSQL a date).
    """
    today = utcnow().date()
    first = today - timedelta(days=days - 1)
    day = pw.fn.date(Call.started_at).python_value(pw.DateField().python_value)
    query = (
        Call.select(
            day.alias("day"),
            pw.fn.COUNT(Call.id),
            pw.fn.COUNT(Call.answered_at),
            pw.fn.COALESCE(pw.fn.SUM(Call.billed_minutes), 0),
        )
        .where((Call.tenant == tenant) & (Call.started_at >= datetime.combine(first, time())))
        .group_by(day)
        .tuples()
    )
    rows = cast(list[tuple[date, int, int, int]], list(query))
    found = {row[0]: row[1:] for row in rows}
    totals = []
    for offset in range(days):
        current = first + timedelta(days=offset)
        calls, answered, minutes = found.get(current, (0, 0, 0))
        totals.append(DayTotal(current, int(calls), int(answered), int(minutes)))
    return totals
