"""Usage: a tenant's calls, billed minutes and AI cost over a range of days, and its limits."""

from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any, cast

import peewee as pw

from app.errors import ValidationFailed
from app.models import Call, Tenant
from app.services import tenants as tenant_service
from app.services.calls.constants import COST_COMPONENTS
from app.util import utcnow

# The longest range a report covers: a leap year of days.
MAX_DAYS = 366


@dataclass(frozen=True)
class UsageDay:
    """One UTC day: the calls that started on it, their billed minutes and AI cost."""

    date: date
    calls: int = 0
    answered_calls: int = 0
    billed_minutes: int = 0
    ai_cost_idr: int = 0


@dataclass(frozen=True)
class Usage:
    active_calls: int
    concurrent_call_limit: int
    rate_limit_per_minute: int
    from_: date
    to: date  # exclusive: the day after the last day counted
    calls: int
    answered_calls: int
    billed_minutes: int
    ai_cost_idr: int
    cost_breakdown: dict[str, int]
    analysis_cost_idr: int  # post-call analyses' requests: never billed, not in ai_cost_idr
    days: list[UsageDay] = field(default_factory=list)


def this_month(today: date) -> tuple[date, date]:
    """The first day of today's month and the first day of the next."""
    first = today.replace(day=1)
    following = (first + timedelta(days=32)).replace(day=1)
    return first, following


def _range(from_: date | None, to: date | None) -> tuple[date, date]:
    """The days a report covers, [from_, to), with this calendar month's ends as defaults."""
    first, following = this_month(utcnow().date())
    from_ = from_ or first
    to = to or following
    if to <= from_:
        raise ValidationFailed(
            "Invalid value for to.",
            details={"to": [f"Must be after from ({from_.isoformat()})."]},
        )
    if (to - from_).days > MAX_DAYS:
        raise ValidationFailed(
            "Invalid value for to.",
            details={"to": [f"A report covers at most {MAX_DAYS} days from from."]},
        )
    return from_, to


def usage(*, tenant: Tenant, from_: date | None = None, to: date | None = None) -> Usage:
    """The tenant's usage over the days [from_, to) (default: this calendar month, UTC) by
    the day its calls started, with its calls in progress and its limits now.

    One grouped query over the (tenant, started_at) index range. A call's AI cost that the
    runtime reported without a breakdown counts as other, so the components add up to
    aiCostIdr; the post-call analyses' cost is a line of its own.
    """
    from_, to = _range(from_, to)
    day = pw.fn.date(Call.started_at).python_value(pw.DateField().python_value)
    total = pw.fn.COALESCE
    query = (
        Call.select(
            day.alias("day"),
            pw.fn.COUNT(Call.id),
            pw.fn.COUNT(Call.answered_at),
            total(pw.fn.SUM(Call.billed_minutes), 0),
            total(pw.fn.SUM(Call.ai_cost_idr), 0),
            total(pw.fn.SUM(Call.cost_llm_idr), 0),
            total(pw.fn.SUM(Call.cost_stt_idr), 0),
            total(pw.fn.SUM(Call.cost_tts_idr), 0),
            total(pw.fn.SUM(Call.cost_telephony_idr), 0),
            total(pw.fn.SUM(pw.fn.COALESCE(Call.cost_other_idr, Call.ai_cost_idr)), 0),
            total(pw.fn.SUM(Call.analysis_cost_idr), 0),
        )
        .where(
            (Call.tenant == tenant)
            & (Call.started_at >= datetime.combine(from_, time()))
            & (Call.started_at < datetime.combine(to, time()))
        )
        .group_by(day)
        .tuples()
    )
    rows = cast(list[tuple[Any, ...]], list(query))
    found = {row[0]: [int(value) for value in row[1:]] for row in rows}
    sums = [sum(values) for values in zip(*found.values(), strict=True)] or [0] * 10
    days = [
        UsageDay(current, *found[current][:4]) if current in found else UsageDay(current)
        for current in (from_ + timedelta(days=n) for n in range((to - from_).days))
    ]
    now = Tenant.get_by_id(tenant.id)
    return Usage(
        active_calls=now.active_calls,
        concurrent_call_limit=tenant_service.concurrent_call_limit_of(now),
        rate_limit_per_minute=tenant_service.rate_limit_of(now),
        from_=from_,
        to=to,
        calls=sums[0],
        answered_calls=sums[1],
        billed_minutes=sums[2],
        ai_cost_idr=sums[3],
        cost_breakdown=dict(zip(COST_COMPONENTS, sums[4:9], strict=True)),
        analysis_cost_idr=sums[9],
        days=days,
    )
