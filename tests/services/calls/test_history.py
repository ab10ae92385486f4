"""Call history services: the per-day totals of the overview's chart."""

import re
from datetime import datetime, time, timedelta

import pytest

from app import db
from app.models import Call
from app.services import billing
from app.services.calls import history as call_history
from app.services.calls import lifecycle as call_lifecycle
from app.util import utcnow
from tests.conftest import DID, using_postgres
from tests.helpers import ACTOR, captured_queries


@pytest.fixture
def line(tenant, did):
    billing.grant(actor=ACTOR, tenant=tenant, minutes=1000)
    return did


def whole_call(*, talk: int, started_at: datetime, answer: bool = True) -> str:
    # Started as long ago as it lasts (a call reports no more than it lived), then moved.
    lasted = utcnow() - timedelta(seconds=talk + 10)
    call = call_lifecycle.start_call(
        did=DID, caller_number="+6281234567890", started_at=lasted
    ).call
    if answer:
        call_lifecycle.answer_call(call_id=call.id)
    call_lifecycle.end_call(
        call_id=call.id,
        status="ended",
        duration_seconds=talk + 10,
        talk_time_seconds=talk,
        hangup_reason="normal",
        hangup_initiator="caller",
        ai_cost_idr=0,
    )
    Call.update(started_at=started_at).where(Call.id == call.id).execute()
    return call.id


def test_daily_totals_are_30_days_up_to_today_with_zeros(tenant):
    totals = call_history.daily_totals(tenant=tenant)
    today = utcnow().date()
    assert [total.day for total in totals] == [today - timedelta(days=29 - n) for n in range(30)]
    assert {(total.calls, total.answered, total.minutes) for total in totals} == {(0, 0, 0)}


def test_daily_totals_count_calls_answered_and_billed_minutes_per_utc_day(tenant, line):
    today = utcnow().date()
    midnight = datetime.combine(today, time())
    whole_call(talk=80, started_at=midnight)  # 2 minutes
    whole_call(talk=30, started_at=midnight + timedelta(hours=23, minutes=59))  # 1 minute
    whole_call(talk=0, started_at=midnight - timedelta(seconds=1), answer=False)
    whole_call(talk=200, started_at=midnight - timedelta(days=29))  # 4, the first day shown
    whole_call(talk=60, started_at=midnight - timedelta(days=29, seconds=1))  # too old
    totals = {total.day: total for total in call_history.daily_totals(tenant=tenant)}
    assert len(totals) == 30
    shown = {
        (day - today).days: (total.calls, total.answered, total.minutes)
        for day, total in totals.items()
        if total.calls
    }
    assert shown == {0: (2, 2, 3), -1: (1, 0, 0), -29: (1, 1, 4)}


def test_daily_totals_leave_out_other_tenants_and_open_calls_bill_nothing(
    tenant, other_tenant, line
):
    call_lifecycle.start_call(did=DID, caller_number="+6281234567890")  # still ringing
    [today] = call_history.daily_totals(tenant=tenant, days=1)
    assert (today.calls, today.answered, today.minutes) == (1, 0, 0)
    [theirs] = call_history.daily_totals(tenant=other_tenant, days=1)
    assert (theirs.calls, theirs.minutes) == (0, 0)


# How PostgreSQL's plan reads an index range of the call (a bitmap scan when many rows match).
INDEX_RANGE = r"(Index (Only )?Scan (Backward )?using|Bitmap Index Scan on) call_tenant_id_"


def a_call_a_day(tenant, *, until: datetime, days: int = 1000) -> None:
    """A call a day for days days up to until, so PostgreSQL's planner weighs the call's
    indexes by what they hold (on an empty table its choice among them is arbitrary)."""
    rows = [
        {
            "id": f"call_{index:020d}",
            "tenant": tenant.id,
            "caller_number": "+6281234567890",
            "callee_number": DID,
            "started_at": until - timedelta(days=index),
        }
        for index in range(days)
    ]
    Call.insert_many(rows).execute()
    if using_postgres():
        db.database.obj.execute_sql("ANALYZE call")


def test_daily_totals_read_an_index_range_of_tenant_and_started_at(tenant):
    a_call_a_day(tenant, until=utcnow())
    with captured_queries() as seen:
        call_history.daily_totals(tenant=tenant)
    [statement] = seen
    sql, params = statement.sql, statement.params
    database = db.database.obj
    if using_postgres():
        with database.atomic():
            database.execute_sql("SET LOCAL enable_seqscan = off")
            plan = " ".join(row[0] for row in database.execute_sql("EXPLAIN " + sql, params))
        assert re.search(INDEX_RANGE + r"\w*started_at", plan), plan
        assert re.search(r"Index Cond: .*tenant_id.*started_at >=", plan), plan
    else:
        rows = database.execute_sql("EXPLAIN QUERY PLAN " + sql, params)
        plan = " ".join(row[-1] for row in rows)
        assert "USING INDEX call_tenant_id_started_at_id (tenant_id=? AND started_at>?)" in plan


@pytest.mark.parametrize("number", ["+6281234567890", "+62812*"])
def test_a_search_by_caller_number_reads_an_index_range_of_tenant_and_number(tenant, number):
    # A thousand calls from as many numbers, so PostgreSQL's planner weighs the indexes by
    # what they hold (on an empty table its choice among them is arbitrary).
    now = utcnow()
    rows = [
        {
            "id": f"call_{index:020d}",
            "tenant": tenant.id,
            "caller_number": f"+62{8100000000 + index * 7919}",
            "callee_number": DID,
            "started_at": now - timedelta(minutes=index),
        }
        for index in range(1000)
    ]
    Call.insert_many(rows).execute()
    if using_postgres():
        db.database.obj.execute_sql("ANALYZE call")
    with captured_queries() as seen:
        call_history.list_calls(tenant=tenant, limit=10, offset=0, caller_number=number)
    sql, params = seen[0].sql, seen[0].params
    database = db.database.obj
    if using_postgres():
        with database.atomic():
            database.execute_sql("SET LOCAL enable_seqscan = off")
            plan = " ".join(row[0] for row in database.execute_sql("EXPLAIN " + sql, params))
        assert re.search(INDEX_RANGE + "caller_", plan), plan
        assert re.search(r"Index Cond: .*tenant_id.*caller_number", plan), plan
    else:
        rows = database.execute_sql("EXPLAIN QUERY PLAN " + sql, params)
        plan = " ".join(row[-1] for row in rows)
        condition = (
            "caller_number=?" if "*" not in number else "caller_number>? AND caller_number<?"
        )
        used = (
            f"USING INDEX call_tenant_id_caller_number_started_at_id (tenant_id=? AND {condition})"
        )
        assert used in plan, plan
