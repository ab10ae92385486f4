"""GET /api/v1/usage: a range of days' calls, minutes and costs, the calls in progress and
the tenant's limits."""

import re
from datetime import date, datetime, time, timedelta

import pytest

from app import db
from app.models import Call
from app.services import tenants as tenant_service
from app.services import usage as usage_service
from app.util import utcnow
from tests.call_flow import answer, end, end_body, report_end, start
from tests.conftest import using_postgres
from tests.helpers import ACTOR, assert_error, captured_queries
from tests.services.calls.test_history import INDEX_RANGE, a_call_a_day

COSTS = {"llm": 700, "stt": 200, "tts": 250, "telephony": 50, "other": 0}


def usage(client, headers, query=""):
    response = client.get(f"/api/v1/usage{query}", headers=headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.json


def call_on(client, runtime_headers, did, day, *, talk=0, answered=True, **end_fields):
    """A call started at noon (UTC) of day, answered and ended with talk seconds."""
    call_id = start(client, runtime_headers, did).json["id"]
    if answered:
        answer(client, runtime_headers, call_id)
    status = "ended" if answered else "dropped"
    body = end_body(status=status, talkTimeSeconds=talk, **end_fields)
    if body["aiCostIdr"] is None:
        del body["aiCostIdr"]  # the breakdown's sum
    ended = report_end(client, runtime_headers, call_id, body)
    assert ended.status_code == 200, ended.get_data(as_text=True)
    moment = datetime.combine(day, time(12))
    Call.update(started_at=moment).where(Call.id == call_id).execute()
    return call_id


def test_usage_defaults_to_this_calendar_month(client, headers):
    today = utcnow().date()
    body = usage(client, headers)
    first = today.replace(day=1)
    following = (first + timedelta(days=32)).replace(day=1)
    assert (body["from"], body["to"]) == (first.isoformat(), following.isoformat())
    assert [day["date"] for day in body["days"]] == [
        (first + timedelta(days=n)).isoformat() for n in range((following - first).days)
    ]
    assert body["days"][0] == {
        "date": first.isoformat(),
        "calls": 0,
        "billedMinutes": 0,
        "aiCostIdr": 0,
    }


def test_an_empty_tenant_has_zeros_and_its_limits(client, headers):
    body = usage(client, headers, "?from=2026-03-01&to=2026-03-03")
    assert body == {
        "activeCalls": 0,
        "concurrentCallLimit": 20,
        "rateLimitPerMinute": 300,
        "from": "2026-03-01",
        "to": "2026-03-03",
        "calls": 0,
        "answeredCalls": 0,
        "billedMinutes": 0,
        "aiCostIdr": 0,
        "costBreakdown": {"llm": 0, "stt": 0, "tts": 0, "telephony": 0, "other": 0},
        "analysisCostIdr": 0,
        "days": [
            {"date": "2026-03-01", "calls": 0, "billedMinutes": 0, "aiCostIdr": 0},
            {"date": "2026-03-02", "calls": 0, "billedMinutes": 0, "aiCostIdr": 0},
        ],
    }


def test_usage_sums_calls_minutes_and_costs_by_day(client, headers, runtime_headers, did):
    march = date(2026, 3, 1)
    call_on(client, runtime_headers, did, march, talk=61, aiCostIdr=None, costBreakdown=COSTS)
    call_on(client, runtime_headers, did, march, talk=30, aiCostIdr=400)  # no breakdown: other
    third = march + timedelta(days=2)
    call_on(client, runtime_headers, did, third, talk=0, answered=False, aiCostIdr=0)
    call_on(client, runtime_headers, did, date(2026, 2, 28), talk=600, aiCostIdr=9)  # before
    call_on(client, runtime_headers, did, date(2026, 3, 4), talk=600, aiCostIdr=9)  # to: after

    body = usage(client, headers, "?from=2026-03-01&to=2026-03-04")
    assert (body["calls"], body["answeredCalls"], body["billedMinutes"]) == (3, 2, 3)
    assert body["aiCostIdr"] == 1600
    assert body["costBreakdown"] == {**COSTS, "other": 400}
    assert sum(body["costBreakdown"].values()) == body["aiCostIdr"]
    assert body["days"] == [
        {"date": "2026-03-01", "calls": 2, "billedMinutes": 3, "aiCostIdr": 1600},
        {"date": "2026-03-02", "calls": 0, "billedMinutes": 0, "aiCostIdr": 0},
        {"date": "2026-03-03", "calls": 1, "billedMinutes": 0, "aiCostIdr": 0},
    ]


def test_a_day_runs_from_midnight_utc(client, headers, runtime_headers, did):
    for moment in ("2026-03-01 23:59:59.999", "2026-03-02 00:00:00"):
        call_id = start(client, runtime_headers, did).json["id"]
        Call.update(started_at=datetime.fromisoformat(moment)).where(Call.id == call_id).execute()
    body = usage(client, headers, "?from=2026-03-01&to=2026-03-03")
    assert [day["calls"] for day in body["days"]] == [1, 1]


def test_calls_in_progress_count_against_the_limit(client, headers, runtime_headers, tenant, did):
    tenant_service.set_plan(actor=ACTOR, tenant=tenant, plan="starter")
    ids = [start(client, runtime_headers, did).json["id"] for _ in range(3)]
    body = usage(client, headers)
    assert (body["activeCalls"], body["concurrentCallLimit"], body["rateLimitPerMinute"]) == (
        3,
        5,
        60,
    )
    assert (body["calls"], body["answeredCalls"], body["billedMinutes"]) == (3, 0, 0)
    end(client, runtime_headers, ids[0], status="dropped", talkTimeSeconds=0)
    assert usage(client, headers)["activeCalls"] == 2


def test_another_tenants_calls_are_not_counted(
    client, headers, other_headers, runtime_headers, did
):
    start(client, runtime_headers, did)
    assert usage(client, other_headers)["calls"] == 0
    assert usage(client, other_headers)["activeCalls"] == 0
    assert usage(client, headers)["calls"] == 1


@pytest.mark.parametrize("field", ["from", "to"])
@pytest.mark.parametrize(
    "value",
    ["yesterday", "2026-13-01", "2026-02-30", "2026-03-01T00:00:00Z", "", "01/03/2026", "%00"],
)
def test_a_date_that_is_not_iso_is_422_naming_it(client, headers, field, value):
    response = client.get(f"/api/v1/usage?{field}={value}", headers=headers)
    assert set(assert_error(response, 422, "validation_error")["details"]) == {field}


@pytest.mark.parametrize(
    "query",
    [
        "?from=2026-03-02&to=2026-03-02",
        "?from=2026-03-02&to=2026-03-01",
        "?from=2025-01-01&to=2026-01-03",
        "?from=0001-01-01&to=9999-12-31",
        "?to=2000-01-01",
        "?from=9999-12-31",
    ],
)
def test_a_range_that_is_empty_or_longer_than_366_days_is_422(client, headers, query):
    response = client.get(f"/api/v1/usage{query}", headers=headers)
    assert set(assert_error(response, 422, "validation_error")["details"]) == {"to"}


def test_a_leap_year_is_one_report(client, headers):
    body = usage(client, headers, "?from=2028-01-01&to=2029-01-01")
    assert len(body["days"]) == 366


def test_usage_needs_an_api_key(client):
    assert_error(client.get("/api/v1/usage"), 401, "unauthorized")


def test_usage_reads_an_index_range_of_tenant_and_started_at(tenant):
    a_call_a_day(tenant, until=datetime(2027, 1, 1))
    with captured_queries() as seen:
        usage_service.usage(tenant=tenant, from_=date(2026, 3, 1), to=date(2026, 4, 1))
    sql, params = seen[0].sql, seen[0].params
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
        assert (
            "USING INDEX call_tenant_id_started_at_id (tenant_id=? AND started_at>? AND "
            "started_at<?)" in plan
        ), plan
