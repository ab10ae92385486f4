"""Usage: a month's calls, minutes and AI cost by day (a chart, and the days with calls) and by
component, and the calls in progress against the tenant's limit."""

import re
from datetime import date, timedelta

from flask import g, render_template, request

from app.dashboard import bp
from app.dashboard.calls import COST_LABELS
from app.dashboard.charts import daily_chart
from app.services import usage as usage_service
from app.services.calls.history import DayTotal
from app.util import utcnow

# Months the picker offers, this one included.
PICKED_MONTHS = 12


def _months(today: date) -> list[date]:
    """The first days of this month and the months before it, newest first."""
    months = [today.replace(day=1)]
    while len(months) < PICKED_MONTHS:
        months.append((months[-1] - timedelta(days=1)).replace(day=1))
    return months


def _picked(text: str, months: list[date]) -> date:
    """The month asked for (YYYY-MM) among those offered; this month for anything else."""
    if re.fullmatch(r"\d{4}-\d{2}", text):
        for month in months:
            if f"{month:%Y-%m}" == text:
                return month
    return months[0]


@bp.route("/usage")
def usage():
    months = _months(utcnow().date())
    first = _picked(request.args.get("month", ""), months)
    report = usage_service.usage(
        tenant=g.tenant, from_=first, to=usage_service.this_month(first)[1]
    )
    totals = [
        DayTotal(day.date, day.calls, day.answered_calls, day.billed_minutes) for day in report.days
    ]
    return render_template(
        "dashboard/usage.html",
        usage=report,
        cost_labels=COST_LABELS,
        chart=daily_chart(totals),
        months=months,
        picked=first,
        active_days=[day for day in report.days if day.calls],
    )
