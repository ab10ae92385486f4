"""OS processes reporting the same step of the same call, or starting calls of one tenant,
at the same moment."""

import multiprocessing
import threading

import peewee as pw
import pytest

from app.models import Call, CreditTransaction, Event, Tenant
from app.services import billing
from app.services import tenants as tenant_service
from tests.call_flow import RUNTIME, answer, backdate, end, end_body, start
from tests.conftest import RUNTIME_TOKEN
from tests.helpers import ACTOR

pytestmark = pytest.mark.slow


def post_when_released(config, path, body, barrier, results, threads):
    """Child process: build the app on the shared database, wait for the others, then post
    from each of threads threads at once (each on its own database connection)."""
    from app import create_app

    app = create_app(config)
    headers = {"Authorization": f"Bearer {RUNTIME_TOKEN}"}
    with app.app_context():
        app.test_client().get("/healthz")  # import and warm up everything before the race

    def post():
        client = app.test_client()
        with app.app_context():
            barrier.wait(timeout=60)
            response = client.post(path, json=body, headers=headers)
            results.put((response.status_code, response.get_json()))

    posters = [threading.Thread(target=post) for _ in range(threads)]
    for poster in posters:
        poster.start()
    for poster in posters:
        poster.join()


def race(app_config, path, body, processes=2, threads=1):
    """Post body to path from processes x threads clients released at the same moment."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes * threads)
    results = context.Queue()
    children = [
        context.Process(
            target=post_when_released,
            args=(app_config, path, body, barrier, results, threads),
        )
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    answers = [results.get(timeout=90) for _ in range(processes * threads)]
    for child in children:
        child.join(timeout=30)
        assert child.exitcode == 0
    return answers


def test_two_processes_ending_the_same_call_charge_it_once(
    app, app_config, client, runtime_headers, tenant, did
):
    call_id = start(client, runtime_headers, did).json["id"]
    client.post(f"{RUNTIME}/{call_id}/answered", headers=runtime_headers)
    body = end_body(talkTimeSeconds=150)
    backdate(call_id, body["durationSeconds"])
    answers = race(app_config, f"{RUNTIME}/{call_id}/ended", body)

    assert [status for status, _ in answers] == [200, 200]
    assert answers[0][1] == answers[1][1]
    assert answers[0][1]["billedMinutes"] == 3
    usage = CreditTransaction.select().where(CreditTransaction.type == "usage")
    assert [(entry.minutes, entry.call_id) for entry in usage] == [(-3, call_id)]
    refreshed = Tenant.get_by_id(tenant.id)
    assert (refreshed.balance_minutes, refreshed.lifetime_used_minutes) == (97, 3)
    assert (refreshed.reserved_minutes, refreshed.active_calls) == (0, 0)  # freed once
    assert Event.select().where(Event.type == "call.ended").count() == 1
    assert Call.get_by_id(call_id).status == "ended"


def test_two_processes_starting_the_same_provider_call_record_one_call(
    app_config, client, runtime_headers, tenant, did
):
    body = {"did": did, "callerNumber": "+6281234567890", "providerCallId": "prov-race"}
    answers = race(app_config, RUNTIME, body)

    assert sorted(status for status, _ in answers) == [200, 201]
    assert answers[0][1]["id"] == answers[1][1]["id"]
    assert Call.select().count() == 1
    assert Tenant.get_by_id(tenant.id).calls_count == 1
    assert Event.select().where(Event.type == "call.started").count() == 1


def ledger_sum(tenant_id):
    return (
        CreditTransaction.select(pw.fn.SUM(CreditTransaction.minutes))
        .where(CreditTransaction.tenant == tenant_id)
        .scalar()
    )


def assert_balance_is_the_ledger(tenant_id):
    refreshed = Tenant.get_by_id(tenant_id)
    assert refreshed.balance_minutes == ledger_sum(tenant_id)
    return refreshed


def set_balance(tenant, minutes):
    billing.adjust(tenant=tenant, actor=ACTOR, minutes=minutes - 100)


def start_twenty_at_once(app_config, did):
    """20 starts of calls to did at once: 4 processes x 5 threads."""
    body = {"did": did, "callerNumber": "+6281234567890"}
    return race(app_config, RUNTIME, body, processes=4, threads=5)


def end_each_within_its_allowance(client, runtime_headers, admitted):
    for body in admitted:
        answer(client, runtime_headers, body["id"])
        seconds = body["session"]["maxCallDurationSeconds"]
        response = end(client, runtime_headers, body["id"], talkTimeSeconds=seconds)
        assert response.status_code == 200


def test_twenty_concurrent_starts_with_one_minute_left_admit_exactly_one(
    app_config, client, headers, runtime_headers, tenant, did
):
    set_balance(tenant, 1)
    answers = start_twenty_at_once(app_config, did)

    admitted = [body for status, body in answers if status == 201]
    refused = [body for status, body in answers if status != 201]
    assert len(admitted) == 1
    assert admitted[0]["session"]["maxCallDurationSeconds"] == 60
    assert {(body["error"]["code"]) for body in refused} == {"no_credits"}
    assert len(refused) == 19
    credits = client.get("/api/v1/credits", headers=headers).json
    assert (credits["balanceMinutes"], credits["reservedMinutes"]) == (1, 1)
    assert credits["availableMinutes"] == 0
    assert_balance_is_the_ledger(tenant.id)

    end_each_within_its_allowance(client, runtime_headers, admitted)
    refreshed = assert_balance_is_the_ledger(tenant.id)
    assert (refreshed.balance_minutes, refreshed.reserved_minutes) == (0, 0)


def test_twenty_concurrent_starts_hold_no_more_than_the_balance(
    app_config, client, headers, runtime_headers, tenant, did, agent_id
):
    patched = client.patch(
        f"/api/v1/agents/{agent_id}", json={"maxCallDurationMinutes": 3}, headers=headers
    )
    assert patched.status_code == 200
    set_balance(tenant, 10)
    answers = start_twenty_at_once(app_config, did)

    admitted = [body for status, body in answers if status == 201]
    allowances = sorted(body["session"]["maxCallDurationSeconds"] for body in admitted)
    assert allowances == [60, 180, 180, 180]
    assert sum(allowances) == 600
    assert [status for status, _ in answers].count(409) == 16
    credits = client.get("/api/v1/credits", headers=headers).json
    assert (credits["reservedMinutes"], credits["availableMinutes"]) == (10, 0)
    assert_balance_is_the_ledger(tenant.id)

    end_each_within_its_allowance(client, runtime_headers, admitted)
    refreshed = assert_balance_is_the_ledger(tenant.id)
    assert (refreshed.balance_minutes, refreshed.reserved_minutes) == (0, 0)
    assert Call.select().where(Call.status == "ended").count() == 4


def limit_to(tenant, calls):
    tenant_service.set_plan(actor=ACTOR, tenant=tenant, plan="business", concurrent_calls=calls)


def test_twenty_concurrent_starts_at_a_limit_of_five_admit_exactly_five(
    app_config, client, headers, runtime_headers, tenant, did
):
    limit_to(tenant, 5)  # 100 minutes: credit for ten 10-minute calls
    answers = start_twenty_at_once(app_config, did)

    admitted = [body for status, body in answers if status == 201]
    refused = [body["error"] for status, body in answers if status != 201]
    assert len(admitted) == 5
    assert [error["code"] for error in refused] == ["concurrency_limit"] * 15
    refreshed = Tenant.get_by_id(tenant.id)
    assert (refreshed.active_calls, refreshed.reserved_minutes) == (5, 50)
    failed = Call.select().where(Call.hangup_reason == "concurrency_limit")
    assert sorted(call.id for call in failed) == sorted(e["details"]["callId"] for e in refused)
    assert all(call.reserved_minutes == 0 for call in failed)

    end_each_within_its_allowance(client, runtime_headers, admitted)
    refreshed = assert_balance_is_the_ledger(tenant.id)
    assert (refreshed.active_calls, refreshed.reserved_minutes) == (0, 0)
    assert refreshed.balance_minutes == 50


def test_twenty_concurrent_starts_admit_no_more_than_the_credit_holds(
    app_config, client, headers, runtime_headers, tenant, did, agent_id
):
    patched = client.patch(
        f"/api/v1/agents/{agent_id}", json={"maxCallDurationMinutes": 3}, headers=headers
    )
    assert patched.status_code == 200
    limit_to(tenant, 5)
    set_balance(tenant, 10)  # credit for four calls (3, 3, 3 and 1 minutes): fewer than five
    answers = start_twenty_at_once(app_config, did)

    admitted = [body for status, body in answers if status == 201]
    allowances = sorted(body["session"]["maxCallDurationSeconds"] for body in admitted)
    assert allowances == [60, 180, 180, 180]
    assert {body["error"]["code"] for status, body in answers if status != 201} == {"no_credits"}
    refreshed = Tenant.get_by_id(tenant.id)
    assert (refreshed.active_calls, refreshed.reserved_minutes) == (4, 10)

    end_each_within_its_allowance(client, runtime_headers, admitted)
    refreshed = assert_balance_is_the_ledger(tenant.id)
    assert (refreshed.active_calls, refreshed.reserved_minutes, refreshed.balance_minutes) == (
        0,
        0,
        0,
    )
