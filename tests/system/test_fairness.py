"""No tenant holds up another: hostile endpoints against real worker.py processes.

A trickling receiver (headers at once, then a byte at a time) and a sleeping one, on
127.0.0.1, against real worker.py processes on Redis; deadlines shortened through settings
(the behaviour is the same at the defaults, only slower).
"""

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import pytest

from app import create_app, db, queue
from app.db import database
from app.models import Delivery, DeliveryAttempt
from app.services import billing, events
from app.services import keys as key_service
from app.services import phone_numbers as number_service
from app.services import tenants as tenant_service
from app.services.deliveries import schedule as delivery_schedule
from tests.call_flow import answer, start
from tests.conftest import RUNTIME_TOKEN
from tests.helpers import ACTOR
from tests.receiver import Answer, Receiver, Trickler
from tests.runtime.test_function_calls import define, echo, invoke
from tests.system.workers import register_webhook, rq_config, wait_for_worker, wait_until

ATTEMPT_S = 0.5  # WEBHOOK_TIMEOUT in these tests: the whole answer, on the clock
# The whole retry schedule (about 28 h) in about 2 s.
SCHEDULE = {"WEBHOOK_TIMEOUT": ATTEMPT_S, "WEBHOOK_RETRY_SCALE": 0.00002}


@pytest.fixture
def app_config(app_config, redis_url, redis_client):
    return {**rq_config(app_config, redis_url), "WEBHOOK_TIMEOUT": ATTEMPT_S}


RUNTIME_HEADERS = {"Authorization": f"Bearer {RUNTIME_TOKEN}"}


def live_call(client, tenant, agent_id, did) -> str:
    """An answered call of tenant on a number of its own that answers with agent_id."""
    number = number_service.add_number(actor=ACTOR, tenant=tenant, display_number=did)
    number_service.assign_agent(actor=ACTOR, tenant=tenant, number_id=number.id, agent_id=agent_id)
    billing.grant(actor=ACTOR, tenant=tenant, minutes=100)
    call_id = start(client, RUNTIME_HEADERS, did).json["id"]
    assert answer(client, RUNTIME_HEADERS, call_id).status_code == 200
    return call_id


def emit(tenant, **data):
    with database.atomic():
        return events.emit(tenant_id=tenant.id, type="call.ended", data={"callId": "c", **data})


def test_a_trickled_delivery_counts_every_attempt_and_fails_on_schedule(
    tenant, workers, redis_client
):
    """Each attempt ends at its deadline (never at the lease), is counted, and the delivery
    fails after the last attempt like any other failing receiver's."""
    with Trickler() as trickler:
        register_webhook(tenant, trickler.url)
        workers.start(queues=("webhooks",), **SCHEDULE)
        wait_for_worker(workers, redis_client, ("webhooks",))
        started = time.monotonic()
        emit(tenant)
        wait_until(
            lambda: Delivery.get().status == "failed", 15, "the delivery did not fail", workers
        )
        elapsed = time.monotonic() - started
        attempts = [request.headers["X-Service-Attempt"] for request in trickler.requests]
    delivery = Delivery.get()
    assert delivery.attempts == delivery_schedule.MAX_ATTEMPTS == 8
    assert attempts == [str(number) for number in range(1, 9)]  # one send at a time
    log = list(DeliveryAttempt.select().order_by(DeliveryAttempt.number))
    assert [row.number for row in log] == list(range(1, 9))
    assert all(ATTEMPT_S * 1000 <= row.duration_ms < ATTEMPT_S * 1000 + 300 for row in log)
    assert {row.error for row in log} == {"The receiver did not answer in time."}
    # Eight deadlines, the shortened schedule's waits and a sweep (0.2 s) before each retry:
    # the delays between the attempts are the schedule's, not a lease's (3 s).
    delays = [
        delay * SCHEDULE["WEBHOOK_RETRY_SCALE"] * 1.2 for delay in delivery_schedule.RETRY_DELAYS
    ]
    assert elapsed < 8 * ATTEMPT_S + sum(delays) + 8 * 0.3
    times = [row.attempted_at for row in log]
    gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:], strict=False)]
    assert max(gaps) < ATTEMPT_S + max(delays) + 0.3


def test_trickling_webhooks_and_a_replay_of_one_tenant_leave_anothers_events_on_time(
    client, headers, tenant, other_tenant, workers, redis_client
):
    """Tenant A: six webhooks whose receivers trickle, and a replay of 50 events to one that
    sleeps past the deadline. Tenant B's events still arrive within a second or two."""
    for _ in range(49):
        emit(tenant)  # kept in the event log before any webhook: replayed below
    with ExitStack() as stack:
        tricklers = [stack.enter_context(Trickler()) for _ in range(6)]
        sleeper = stack.enter_context(Receiver(lambda request: Answer(delay=3)))
        b_receiver = stack.enter_context(Receiver())
        for trickler in tricklers:
            register_webhook(tenant, trickler.url)
        sleeping = register_webhook(tenant, sleeper.url)
        register_webhook(other_tenant, b_receiver.url)
        workers.start(queues=("webhooks",), **SCHEDULE)
        wait_for_worker(workers, redis_client, ("webhooks", "webhooks_slow"))
        emit(tenant)  # to all seven of A's webhooks
        response = client.post(
            f"/api/v1/webhooks/{sleeping.id}/replay",
            json={"since": "2000-01-01T00:00:00Z"},
            headers=headers,
        )
        assert response.json == {"replayed": 50}
        wait_until(lambda: sum(t.count() for t in tricklers) >= 2, 5, "A not sent", workers)
        sent = {}
        for number in range(10):
            sent[emit(other_tenant, number=number).id] = time.monotonic()
            time.sleep(0.2)
        b_receiver.wait_for(10, timeout=5)
        busy = sum(t.count() for t in tricklers), len(sleeper.requests)
    arrived = {request.headers["X-Service-Event-Id"]: request.at for request in b_receiver.requests}
    delays = sorted(arrived[event_id] - sent[event_id] for event_id in sent)
    assert len(arrived) == 10 and delays[-1] < 5.0, delays
    assert busy[0] >= 2 and busy[1] >= 1  # A's receivers were being held meanwhile


def test_a_trickling_endpoint_of_one_tenant_leaves_anothers_function_calls_answered(
    app, client, headers, tenant, agent_id, other_tenant, other_headers, workers, redis_client
):
    """Tenant A makes 8 live calls and 2 tests of a function whose endpoint trickles: its
    calls take half of the function workers, its tests half of the test workers, and the rest
    are function_busy at once, so tenant B's live calls of the same moment are answered."""
    with Trickler() as trickler, Receiver(echo) as quick:
        define(client, headers, agent_id, trickler.url + "/orders", timeout_ms=3000)
        a_call = live_call(client, tenant, agent_id, "+6221555203")
        b_agent = client.post(
            "/api/v1/agents", json={"name": "B", "systemPrompt": "Hi."}, headers=other_headers
        ).json["id"]
        define(client, other_headers, b_agent, quick.url + "/orders")
        b_call = live_call(client, other_tenant, b_agent, "+6221555202")
        workers.start(queues=("functions",))
        wait_for_worker(workers, redis_client, ("functions", "function_tests"))

        def a_live(_):
            return invoke(app.test_client(), RUNTIME_HEADERS, a_call, orderId="A").json

        def a_test(_):
            return function_test(app.test_client(), headers, agent_id)

        with ThreadPoolExecutor(10) as pool:
            a_calls = [pool.submit(a_live, n) for n in range(8)]
            a_tests = [pool.submit(a_test, n) for n in range(2)]
            # Half of the 8 function workers and one of the 2 test workers.
            wait_until(lambda: trickler.count() >= 5, 3, "A's calls not made", workers)
            b_answers = []
            for number in range(3):
                started = time.monotonic()
                answer = invoke(client, RUNTIME_HEADERS, b_call, orderId=f"B{number}")
                b_answers.append((answer.json, time.monotonic() - started))
            a_outcomes = [future.result()["error"]["code"] for future in a_calls]
            test_outcomes = [future.result()["error"]["code"] for future in a_tests]
    assert all(json["result"]["status"] == "shipped" for json, _ in b_answers), b_answers
    assert max(elapsed for _, elapsed in b_answers) < 1.0
    share = app.config["FUNCTION_WORKERS"] // 2
    assert sorted(a_outcomes) == ["function_busy"] * share + ["function_timeout"] * share
    assert sorted(test_outcomes) == ["function_busy", "function_timeout"]  # 1 of 2 workers
    assert trickler.count() == share + 1  # the busy calls and test never reached the endpoint


def function_test(client, headers, agent_id) -> dict:
    """POST the test of lookup_order; its report."""
    response = client.post(
        f"/api/v1/agents/{agent_id}/functions/lookup_order/test",
        json={"parameters": {"orderId": "A"}},
        headers=headers,
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.json


def test_a_trickling_endpoint_of_one_tenant_leaves_anothers_function_tests_answered(
    app, client, headers, agent_id, other_headers, workers, redis_client
):
    """Tenant A tests a function whose endpoint trickles, more times at once than there are
    test workers: its tests take half of the test workers and the rest are function_busy at
    once, so tenant B's test of a quick endpoint, a moment later, finds a worker in time."""
    with Trickler() as trickler, Receiver(echo) as quick:
        define(client, headers, agent_id, trickler.url + "/orders")
        b_agent = client.post(
            "/api/v1/agents", json={"name": "B", "systemPrompt": "Hi."}, headers=other_headers
        ).json["id"]
        define(client, other_headers, b_agent, quick.url + "/orders")
        workers.start(queues=("functions",))
        wait_for_worker(workers, redis_client, ("functions", "function_tests"))
        tests = app.config["FUNCTION_TEST_WORKERS"] + 1
        with ThreadPoolExecutor(tests) as pool:
            a_tests = [
                pool.submit(function_test, app.test_client(), headers, agent_id)
                for _ in range(tests)
            ]
            wait_until(lambda: trickler.count() >= 1, 3, "A's test not made", workers)
            time.sleep(0.5)  # A's other tests are answered, or queued before B's
            started = time.monotonic()
            b_report = function_test(client, other_headers, b_agent)
            b_elapsed = time.monotonic() - started
            a_outcomes = [future.result()["error"]["code"] for future in a_tests]
    assert b_report["ok"] is True and b_report["result"]["status"] == "shipped", b_report
    assert b_elapsed < 1.0
    share = app.config["FUNCTION_TEST_WORKERS"] // 2
    busy = ["function_busy"] * (tests - share)
    assert sorted(a_outcomes) == busy + ["function_timeout"] * share
    assert trickler.count() == share  # the busy tests never reached the endpoint


@pytest.fixture
def inline_app(app_config):
    """The app without Redis: jobs run in the web process (inline mode)."""
    app = create_app({**app_config, "REDIS_URL": None, "QUEUE_MODE": "inline"})
    with app.app_context():
        yield app
        queue.shutdown(app)
        db.close_all()


def test_inline_a_trickle_holds_no_web_request_beyond_its_deadline(inline_app):
    """Without Redis, a function call runs in the request and a delivery in the web
    process's background thread: both end at their deadline, and the attempt counts."""
    client = inline_app.test_client()
    tenant = tenant_service.create_tenant(actor=ACTOR, name="inline", plan="business")
    headers = {"x-api-key": key_service.create_key(actor=ACTOR, tenant=tenant, name="k")[1]}
    with Trickler() as trickler:
        agent_id = client.post(
            "/api/v1/agents", json={"name": "A", "systemPrompt": "Hi."}, headers=headers
        ).json["id"]
        define(client, headers, agent_id, trickler.url + "/orders", timeout_ms=1000)
        call_id = live_call(client, tenant, agent_id, "+6221555201")
        started = time.monotonic()
        response = invoke(client, RUNTIME_HEADERS, call_id, orderId="A")
        assert time.monotonic() - started < 1.0 + 0.5
        assert response.json["error"]["code"] == "function_timeout"

        webhook = register_webhook(tenant, trickler.url)
        started = time.monotonic()
        assert client.post(f"/api/v1/webhooks/{webhook.id}/test", headers=headers).status_code
        assert time.monotonic() - started < 0.5  # the request never waits on a delivery
        wait_until(lambda: Delivery.get().attempts == 1, ATTEMPT_S + 1, "not attempted")
        assert trickler.count() == 2
    assert DeliveryAttempt.get().error == "The receiver did not answer in time."
