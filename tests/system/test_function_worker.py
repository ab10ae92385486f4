"""Function calls through a real worker.py process on Redis (the production path)."""

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from redis import Redis

from app import queue
from app.db import database
from app.models import Delivery, Event, FunctionInvocation
from app.services import events
from tests.call_flow import answer, start
from tests.helpers import ACTOR
from tests.receiver import Answer, Receiver
from tests.runtime.test_function_calls import SECRET, define, echo, invoke
from tests.system.workers import (
    ThrowawayRedis,
    rq_config,
    wait_for_reconnect,
    wait_for_worker,
    wait_until,
)

# slow: each test times a function's budget through a real worker process, which holds only
# on a machine that is otherwise quiet (one answered 0.3 s early with another test process
# running beside it).
pytestmark = pytest.mark.slow


@pytest.fixture
def app_config(app_config, redis_url, redis_client):
    return rq_config(app_config, redis_url)


def start_worker(workers, redis_client, queues):
    workers.start(queues=queues)
    wait_for_worker(workers, redis_client, queues)


def recorded() -> FunctionInvocation:
    """The one invocation, once the worker has recorded it (just after answering)."""
    wait_until(lambda: FunctionInvocation.select().exists(), 5, "not recorded")
    return FunctionInvocation.get()


@pytest.fixture
def endpoint():
    with Receiver(echo) as receiver:
        yield receiver


@pytest.fixture
def open_call(client, runtime_headers, did):
    """Starts and answers a call, which is answered with its agent's version then: a test
    defines the functions the call uses first."""

    def open_call():
        call = start(client, runtime_headers, did).json["id"]
        assert answer(client, runtime_headers, call).status_code == 200
        return call

    return open_call


def test_function_call_through_the_worker(
    client, headers, runtime_headers, agent_id, open_call, endpoint, workers, redis_client
):
    start_worker(workers, redis_client, ("functions",))
    define(client, headers, agent_id, endpoint.url + "/orders")
    call_id = open_call()
    response = invoke(client, runtime_headers, call_id, orderId="A-17")
    assert response.json["result"]["status"] == "shipped"
    assert endpoint.requests[0].json()["callId"] == call_id
    assert recorded().status == "succeeded" and recorded().http_status == 200


def test_slow_endpoint_times_out_through_the_worker(
    client, headers, runtime_headers, agent_id, open_call, endpoint, workers, redis_client
):
    start_worker(workers, redis_client, ("functions",))
    define(client, headers, agent_id, endpoint.url + "/sleep")
    call_id = open_call()
    started = time.monotonic()
    response = invoke(client, runtime_headers, call_id, orderId="A")
    assert 4.9 < time.monotonic() - started < 5.5
    assert response.json["error"]["code"] == "function_timeout"
    assert len(endpoint.requests) == 1
    assert recorded().error_code == "function_timeout"


def test_a_live_call_keeps_to_its_functions_timeout_through_the_worker(
    client, headers, runtime_headers, agent_id, open_call, endpoint, workers, redis_client
):
    start_worker(workers, redis_client, ("functions",))
    define(client, headers, agent_id, endpoint.url + "/sleep", timeout_ms=500)
    call_id = open_call()
    started = time.monotonic()
    response = invoke(client, runtime_headers, call_id, orderId="A")
    elapsed = time.monotonic() - started
    assert response.json["error"] == {
        "code": "function_timeout",
        "message": "The function did not answer within 0.5 s.",
    }
    assert elapsed < 0.5 + 0.5
    assert 450 <= recorded().latency_ms <= 1000
    assert len(endpoint.requests) == 1


def run_function_test(client, headers, agent_id, **parameters):
    """POST the test of lookup_order; its report and how long the request took."""
    started = time.monotonic()
    response = client.post(
        f"/api/v1/agents/{agent_id}/functions/lookup_order/test",
        json={"parameters": parameters},
        headers=headers,
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    report = response.json
    assert report["durationMs"] <= report["budgetMs"] + 500
    return report, time.monotonic() - started


def test_a_function_test_runs_on_its_own_workers_and_records_nothing(
    client, headers, agent_id, endpoint, workers, redis_client
):
    import hashlib
    import hmac

    start_worker(workers, redis_client, ("functions",))
    define(client, headers, agent_id, endpoint.url + "/orders")
    report, _ = run_function_test(client, headers, agent_id, orderId="A-17")
    [request] = endpoint.requests
    assert request.json() == {
        "callId": "call_test",
        "functionName": "lookup_order",
        "parameters": {"orderId": "A-17"},
    }
    expected = hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Service-Signature"] == f"sha256={expected}"
    assert (report["ok"], report["statusCode"]) == (True, 200)
    assert report["result"]["status"] == "shipped"
    assert not FunctionInvocation.select().exists()
    assert not Event.select().where(Event.type == "function.called").exists()


@pytest.mark.parametrize("timeout_ms", [500, 5000])
def test_a_function_test_of_a_slow_endpoint_times_out_through_the_worker(
    client, headers, agent_id, endpoint, workers, redis_client, timeout_ms
):
    start_worker(workers, redis_client, ("functions",))
    define(client, headers, agent_id, endpoint.url + "/sleep", timeout_ms=timeout_ms)
    report, elapsed = run_function_test(client, headers, agent_id, orderId="A")
    assert report["error"]["code"] == "function_timeout"
    assert (report["statusCode"], report["budgetMs"]) == (None, timeout_ms)
    assert timeout_ms - 50 <= report["durationMs"] <= timeout_ms + 500
    assert elapsed < timeout_ms / 1000 + 0.5
    assert len(endpoint.requests) == 1


def test_a_function_test_nobody_runs_is_a_timeout_and_never_a_late_request(
    client, headers, agent_id, endpoint, workers, redis_client
):
    define(client, headers, agent_id, endpoint.url + "/orders", timeout_ms=500)
    report, elapsed = run_function_test(client, headers, agent_id, orderId="A")
    assert report["error"]["code"] == "function_timeout" and elapsed < 1.0
    start_worker(workers, redis_client, ("functions",))
    wait_until(lambda: not queue.depth(redis_client, "function_tests"), 10, "still queued")
    time.sleep(0.3)
    assert endpoint.requests == []  # the job found its budget spent and sent nothing


def test_function_tests_never_hold_up_live_calls(
    app, client, headers, runtime_headers, agent_id, open_call, endpoint, workers, redis_client
):
    """Every test worker busy with a slow endpoint: a live call still finds a worker."""
    app.config["FUNCTION_TENANT_SHARE"] = 1.0  # one tenant may take every test worker here
    start_worker(workers, redis_client, ("functions",))
    define(client, headers, agent_id, endpoint.url + "/sleep")
    define(client, headers, agent_id, endpoint.url + "/orders", name="quick")
    call_id = open_call()
    busy = app.config["FUNCTION_TEST_WORKERS"]
    with ThreadPoolExecutor(busy) as pool:
        tests = [
            pool.submit(run_function_test, app.test_client(), headers, agent_id, orderId="A")
            for _ in range(busy)
        ]
        endpoint.wait_for(busy)
        response = invoke(client, runtime_headers, call_id, name="quick", orderId="A")
        assert response.json["result"]["status"] == "shipped"
        assert not any(test.done() for test in tests)  # still waiting for the slow endpoint
        reports = [test.result()[0] for test in tests]
    assert {report["error"]["code"] for report in reports} == {"function_timeout"}


def test_without_a_worker_the_runtime_still_gets_an_answer_and_the_endpoint_no_late_call(
    client, headers, runtime_headers, agent_id, open_call, endpoint, workers, redis_client
):
    define(client, headers, agent_id, endpoint.url + "/orders")
    call_id = open_call()
    response = invoke(client, runtime_headers, call_id, orderId="A")
    assert response.json["error"]["code"] == "function_timeout"
    start_worker(workers, redis_client, ("functions",))
    deadline = time.monotonic() + 10
    while queue.depth(redis_client, "functions"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.3)
    assert endpoint.requests == []  # the job found its deadline gone and sent nothing
    assert FunctionInvocation.get().error_code == "function_timeout"


def test_functions_do_not_wait_behind_a_webhook_backlog(
    client, headers, runtime_headers, agent_id, open_call, tenant, endpoint, workers, redis_client
):
    from app.services import webhooks as webhook_service

    with Receiver(lambda request: Answer(delay=1.0)) as slow:
        webhook_service.create_webhook(
            actor=ACTOR, tenant=tenant, url=slow.url, events=["call.ended"], secret="s" * 20
        )
        with database.atomic():
            for _ in range(200):
                events.emit(tenant_id=tenant.id, type="call.ended", data={"callId": "x"})
        start_worker(workers, redis_client, ("webhooks",))
        start_worker(workers, redis_client, ("functions",))
        slow.wait_for(1)
        define(client, headers, agent_id, endpoint.url + "/orders")
        call_id = open_call()
        started = time.monotonic()
        response = invoke(client, runtime_headers, call_id, orderId="A")
        assert time.monotonic() - started < 1.0
        assert response.json["result"]["status"] == "shipped"
        assert Delivery.select().where(Delivery.status == "pending").count() > 150


def test_a_webhooks_only_worker_yields_the_cpu_to_function_calls(workers, redis_client):
    base = os.getpriority(os.PRIO_PROCESS, 0)
    webhooks = workers.start(queues=("webhooks",))
    functions = workers.start(queues=("functions",))
    both = workers.start(queues=("functions", "webhooks"))
    wait_for_worker(workers, redis_client, ("webhooks", "functions"))
    wait_until(
        lambda: os.getpriority(os.PRIO_PROCESS, webhooks.pid) == base + 10, 10, "not lowered"
    )
    assert os.getpriority(os.PRIO_PROCESS, functions.pid) == base
    assert os.getpriority(os.PRIO_PROCESS, both.pid) == base  # its function workers too


def slow_answer(request):
    return Answer(
        delay=1.0, body=b'{"status": "shipped"}', headers={"Content-Type": "application/json"}
    )


def test_slow_calls_do_not_hold_each_other_up(
    app, headers, client, runtime_headers, agent_id, open_call, workers, redis_client
):
    """One worker makes several calls at once (FUNCTION_WORKERS)."""
    with Receiver(slow_answer) as slow:
        start_worker(workers, redis_client, ("functions",))
        define(client, headers, agent_id, slow.url + "/orders")
        call_id = open_call()
        started = time.monotonic()
        with ThreadPoolExecutor(4) as pool:
            answers = list(
                pool.map(
                    lambda _: invoke(app.test_client(), runtime_headers, call_id, orderId="A"),
                    range(4),
                )
            )
        elapsed = time.monotonic() - started
    assert [a.json for a in answers] == [{"result": {"status": "shipped"}}] * 4
    assert elapsed < 2.5  # one after the other would take 4 s


def test_stopping_the_worker_finishes_the_call_in_hand(
    app, headers, client, runtime_headers, agent_id, open_call, workers, redis_client
):
    with Receiver(slow_answer) as slow:
        process = workers.start(queues=("functions",))
        wait_for_worker(workers, redis_client, ("functions",))
        define(client, headers, agent_id, slow.url + "/orders")
        call_id = open_call()
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(invoke, app.test_client(), runtime_headers, call_id, orderId="A")
            slow.wait_for(1)
            process.send_signal(signal.SIGTERM)
            assert pending.result().json == {"result": {"status": "shipped"}}
        assert process.wait(10) == 0
    assert recorded().status == "succeeded"


def test_a_function_job_nobody_takes_leaves_redis_by_itself(app, redis_client):
    from rq import Queue

    assert (
        queue.call("functions", "tests.system.test_worker.record", "job", timeout=0.1) is None
    )  # no worker runs
    [job] = Queue("functions", connection=redis_client).jobs
    assert 0 < redis_client.ttl(job.key) <= queue.JOB_OPTIONS["functions"]["ttl"]


def test_function_calls_survive_a_redis_restart(
    app, client, headers, runtime_headers, agent_id, open_call, endpoint, workers
):
    """Redis down: the runtime gets function_timeout at once; back: the worker serves again."""
    server = ThrowawayRedis()
    server.start()
    try:
        app.config["REDIS_URL"] = server.url
        app.extensions.pop("redis", None)
        app.extensions.pop("redis_blocking", None)
        workers.start(redis_url=server.url, queues=("functions",))
        wait_for_worker(workers, Redis.from_url(server.url), ("functions",))
        define(client, headers, agent_id, endpoint.url + "/orders")
        call_id = open_call()
        assert "result" in invoke(client, runtime_headers, call_id, orderId="A").json

        server.stop()
        started = time.monotonic()
        response = invoke(client, runtime_headers, call_id, orderId="B")
        assert response.status_code == 200 and time.monotonic() - started < 5.5
        assert response.json["error"]["code"] == "function_timeout"

        server.start()
        wait_for_reconnect(workers, Redis.from_url(server.url))
        response = invoke(client, runtime_headers, call_id, orderId="C")
        assert response.json["result"]["status"] == "shipped"
    finally:
        server.stop()
    assert [r.json()["parameters"]["orderId"] for r in endpoint.requests] == ["A", "C"]
