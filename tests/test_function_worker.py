"""Function calls through a real RQ worker process on Redis (the production path)."""

import time

import pytest
from rq import Worker

from app import queue
from app.models import Delivery, FunctionInvocation
from app.services import events
from tests.call_flow import answer, start
from tests.receiver import Answer, Receiver
from tests.runtime.test_function_calls import define, echo, invoke
from tests.workers import rq_config


@pytest.fixture
def app_config(app_config, redis_url, redis_client):
    return rq_config(app_config, redis_url)


def start_worker(workers, redis_client, queues):
    workers.start(queues=queues)
    deadline = time.monotonic() + 20
    while not any(set(queues) <= set(w.queue_names()) for w in Worker.all(redis_client)):
        assert time.monotonic() < deadline, "the worker did not start\n" + workers.logs()
        time.sleep(0.05)


@pytest.fixture
def endpoint():
    with Receiver(echo) as receiver:
        yield receiver


@pytest.fixture
def call_id(client, runtime_headers, did):
    call = start(client, runtime_headers, did).json["id"]
    answer(client, runtime_headers, call)
    return call


def test_function_call_through_the_worker(
    client, headers, runtime_headers, agent_id, call_id, endpoint, workers, redis_client
):
    start_worker(workers, redis_client, ("functions",))
    define(client, headers, agent_id, endpoint.url + "/orders")
    response = invoke(client, runtime_headers, call_id, orderId="A-17")
    assert response.json["result"]["status"] == "shipped"
    assert endpoint.requests[0].json()["callId"] == call_id
    record = FunctionInvocation.get()
    assert record.status == "succeeded" and record.http_status == 200


def test_slow_endpoint_times_out_through_the_worker(
    client, headers, runtime_headers, agent_id, call_id, endpoint, workers, redis_client
):
    start_worker(workers, redis_client, ("functions",))
    define(client, headers, agent_id, endpoint.url + "/sleep")
    started = time.monotonic()
    response = invoke(client, runtime_headers, call_id, orderId="A")
    assert 4.9 < time.monotonic() - started < 5.5
    assert response.json["error"]["code"] == "function_timeout"
    assert len(endpoint.requests) == 1
    assert FunctionInvocation.get().error_code == "function_timeout"


def test_without_a_worker_the_runtime_still_gets_an_answer_and_the_endpoint_no_late_call(
    client, headers, runtime_headers, agent_id, call_id, endpoint, workers, redis_client
):
    define(client, headers, agent_id, endpoint.url + "/orders")
    response = invoke(client, runtime_headers, call_id, orderId="A")
    assert response.json["error"]["code"] == "function_timeout"
    start_worker(workers, redis_client, ("functions",))
    deadline = time.monotonic() + 10
    while redis_client.llen("rq:queue:functions"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.3)
    assert endpoint.requests == []  # the job found its deadline gone and sent nothing
    assert FunctionInvocation.get().error_code == "function_timeout"


def test_functions_do_not_wait_behind_a_webhook_backlog(
    client, headers, runtime_headers, agent_id, call_id, tenant, endpoint, workers, redis_client
):
    from app.services import webhooks as webhook_service

    with Receiver(lambda request: Answer(delay=1.0)) as slow:
        webhook_service.create_webhook(
            tenant=tenant, url=slow.url, events=["call.ended"], secret="s" * 20
        )
        with queue.transaction():
            for _ in range(200):
                events.emit(tenant_id=tenant.id, type="call.ended", data={"callId": "x"})
        start_worker(workers, redis_client, ("webhooks",))
        start_worker(workers, redis_client, ("functions",))
        slow.wait_for(1)
        define(client, headers, agent_id, endpoint.url + "/orders")
        started = time.monotonic()
        response = invoke(client, runtime_headers, call_id, orderId="A")
        assert time.monotonic() - started < 1.0
        assert response.json["result"]["status"] == "shipped"
        assert Delivery.select().where(Delivery.status == "pending").count() > 150
