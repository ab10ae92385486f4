"""Two OS processes reporting the same step of the same call at the same moment."""

import multiprocessing

import pytest

from app.models import Call, CreditTransaction, Event, Tenant
from tests.call_flow import RUNTIME, end_body, start
from tests.conftest import RUNTIME_TOKEN

pytestmark = pytest.mark.slow


def post_when_released(config, path, body, barrier, results):
    """Child process: build the app on the shared database, wait for the other, then post."""
    from app import create_app

    app = create_app(config)
    client = app.test_client()
    headers = {"Authorization": f"Bearer {RUNTIME_TOKEN}"}
    with app.app_context():
        client.get("/healthz")  # import and warm up everything before the race
        barrier.wait(timeout=30)
        response = client.post(path, json=body, headers=headers)
        results.put((response.status_code, response.get_json()))


def race(app_config, path, body, processes=2):
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    results = context.Queue()
    children = [
        context.Process(target=post_when_released, args=(app_config, path, body, barrier, results))
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    answers = [results.get(timeout=60) for _ in children]
    for child in children:
        child.join(timeout=30)
        assert child.exitcode == 0
    return answers


def test_two_processes_ending_the_same_call_charge_it_once(
    app, app_config, client, runtime_headers, tenant, did
):
    call_id = start(client, runtime_headers, did).json["id"]
    client.post(f"{RUNTIME}/{call_id}/answered", headers=runtime_headers)
    answers = race(app_config, f"{RUNTIME}/{call_id}/ended", end_body(talkTimeSeconds=150))

    assert [status for status, _ in answers] == [200, 200]
    assert answers[0][1] == answers[1][1]
    assert answers[0][1]["billedMinutes"] == 3
    usage = CreditTransaction.select().where(CreditTransaction.type == "usage")
    assert [(entry.minutes, entry.call_id) for entry in usage] == [(-3, call_id)]
    refreshed = Tenant.get_by_id(tenant.id)
    assert (refreshed.balance_minutes, refreshed.lifetime_used_minutes) == (97, 3)
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
