"""Function tests: POST /agents/:id/functions/:name/test against real endpoints on 127.0.0.1.

Inline mode here (the job runs in the web process, as `make run` without Redis); the same
test through a real worker.py process is in tests/system/test_function_worker.py.
"""

import hashlib
import hmac
import socket
import time
from urllib.parse import parse_qsl, urlsplit

import pytest

from app.models import Call, Event, FunctionInvocation
from app.services import function_calls
from tests.helpers import assert_error
from tests.receiver import Receiver
from tests.runtime.test_function_calls import SECRET, define, echo

# The answer comes within the budget plus this (DESIGN.md section 4), as the service measures
# it (durationMs); the client's own clock adds the test client's time on a busy machine.
ANSWER_MARGIN_MS = 500
CLIENT_MARGIN_S = 1.0


@pytest.fixture
def endpoint():
    with Receiver(echo) as receiver:
        yield receiver


def run_test(client, headers, agent_id, name="lookup_order", **body):
    started = time.monotonic()
    response = client.post(
        f"/api/v1/agents/{agent_id}/functions/{name}/test", json=body, headers=headers
    )
    elapsed = time.monotonic() - started
    if response.status_code == 200:
        report = response.json
        assert report["durationMs"] <= report["budgetMs"] + ANSWER_MARGIN_MS, report
        assert elapsed < report["budgetMs"] / 1000 + CLIENT_MARGIN_S, f"{elapsed:.2f} s"
    return response


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_test_is_signed_and_sent_exactly_like_a_live_call(client, headers, agent_id, endpoint):
    define(client, headers, agent_id, endpoint.url + "/orders")
    response = run_test(client, headers, agent_id, parameters={"orderId": "A-17", "quantity": 2})
    assert response.status_code == 200
    [request] = endpoint.requests
    assert (request.method, request.path) == ("POST", "/orders")
    assert request.headers["Content-Type"] == "application/json"
    assert request.body == (
        b'{"callId":"call_test","functionName":"lookup_order",'
        b'"parameters":{"orderId":"A-17","quantity":2}}'
    )
    expected = hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Service-Signature"] == f"sha256={expected}"
    assert request.headers["User-Agent"].startswith("VoiceAgentAPI/")
    report = response.json
    assert list(report) == ["ok", "statusCode", "durationMs", "budgetMs", "result"]
    assert report["ok"] is True and report["statusCode"] == 200 and report["budgetMs"] == 5000
    assert report["result"] == {"status": "shipped", "echo": request.body.decode()}
    assert 0 <= report["durationMs"] < 5000


def test_a_test_request_is_the_live_request_but_for_the_call_id(
    client, headers, runtime_headers, agent_id, did, endpoint
):
    from tests.call_flow import answer, start
    from tests.runtime.test_function_calls import invoke

    define(client, headers, agent_id, endpoint.url + "/orders")
    call_id = start(client, runtime_headers, did).json["id"]
    answer(client, runtime_headers, call_id)
    invoke(client, runtime_headers, call_id, orderId="A-17")
    run_test(client, headers, agent_id, parameters={"orderId": "A-17"})
    live, test = endpoint.requests
    assert test.body == live.body.replace(call_id.encode(), b"call_test")
    expected = hmac.new(SECRET.encode(), test.body, hashlib.sha256).hexdigest()
    assert test.headers["X-Service-Signature"] == f"sha256={expected}"
    of_the_body = {"X-Service-Signature", "Content-Length"}
    assert {k: v for k, v in test.headers.items() if k not in of_the_body} == {
        k: v for k, v in live.headers.items() if k not in of_the_body
    }


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_get_and_delete_tests_send_and_sign_the_query_string(
    client, headers, agent_id, endpoint, method
):
    define(client, headers, agent_id, endpoint.url + "/orders?shop=1", method=method)
    response = run_test(client, headers, agent_id, parameters={"orderId": "A 17", "express": True})
    assert response.json["ok"] is True
    [request] = endpoint.requests
    path = urlsplit(request.path)
    assert (request.method, path.path, request.body) == (method, "/orders", b"")
    assert parse_qsl(path.query) == [
        ("shop", "1"),
        ("callId", "call_test"),
        ("functionName", "lookup_order"),
        ("orderId", "A 17"),
        ("express", "true"),
    ]
    signed = path.query.removeprefix("shop=1&")
    expected = hmac.new(SECRET.encode(), signed.encode(), hashlib.sha256).hexdigest()
    assert request.headers["X-Service-Signature"] == f"sha256={expected}"


def test_a_test_records_nothing_and_emits_no_event(client, headers, agent_id, endpoint):
    define(client, headers, agent_id, endpoint.url + "/orders")
    events = Event.select().count()
    for path in ("/orders", "/fail", "/text"):
        client.patch(
            f"/api/v1/agents/{agent_id}/functions/lookup_order",
            json={"endpoint": endpoint.url + path},
            headers=headers,
        )
        run_test(client, headers, agent_id, parameters={"orderId": "A"})
    run_test(client, headers, agent_id, parameters={})  # invalid
    assert len(endpoint.requests) == 3
    assert FunctionInvocation.select().count() == 0
    assert Event.select().count() == events
    assert Call.select().count() == 0


def test_invalid_parameters_are_a_report_and_never_reach_the_endpoint(
    client, headers, agent_id, endpoint
):
    define(client, headers, agent_id, endpoint.url + "/orders")
    response = run_test(client, headers, agent_id, parameters={"orderId": 17, "colour": "red"})
    assert response.status_code == 200
    report = response.json
    assert list(report) == ["ok", "statusCode", "durationMs", "budgetMs", "error"]
    assert (report["ok"], report["statusCode"], report["budgetMs"]) == (False, None, 5000)
    assert report["error"] == {
        "code": "invalid_parameters",
        "message": "Invalid parameters: orderId: Must be of type string.; "
        "colour: Unknown parameter.",
    }
    assert endpoint.requests == []


def test_parameters_default_to_none_given(client, headers, agent_id, endpoint):
    define(client, headers, agent_id, endpoint.url + "/orders")
    report = run_test(client, headers, agent_id).json
    assert report["error"]["code"] == "invalid_parameters"
    assert "orderId: Missing required parameter." in report["error"]["message"]


@pytest.mark.parametrize(
    ("path", "code", "status"),
    [
        ("/text", "function_invalid_response", 200),
        ("/array", "function_invalid_response", 200),
        ("/deep", "function_invalid_response", 200),
        ("/fail", "function_http_error", 500),
        ("/missing", "function_http_error", 404),
    ],
)
def test_endpoint_failures_give_the_live_call_error(
    client, headers, agent_id, endpoint, path, code, status
):
    define(client, headers, agent_id, endpoint.url + path)
    report = run_test(client, headers, agent_id, parameters={"orderId": "A"}).json
    assert (report["ok"], report["statusCode"], report["error"]["code"]) == (False, status, code)
    assert "result" not in report
    assert len(endpoint.requests) == 1


@pytest.mark.parametrize("timeout_ms", [500, 5000])
def test_a_slow_endpoint_is_a_timeout_within_the_budget(
    client, headers, agent_id, endpoint, timeout_ms
):
    define(client, headers, agent_id, endpoint.url + "/sleep", timeout_ms=timeout_ms)
    report = run_test(client, headers, agent_id, parameters={"orderId": "A"}).json
    assert report["error"] == {
        "code": "function_timeout",
        "message": f"The function did not answer within {timeout_ms / 1000:g} s.",
    }
    assert (report["statusCode"], report["budgetMs"]) == (None, timeout_ms)
    # It waited for the endpoint: the budget was spent, and no more than the margin beyond it.
    assert timeout_ms - 50 <= report["durationMs"] <= timeout_ms + ANSWER_MARGIN_MS
    assert len(endpoint.requests) == 1


def test_a_refused_connection_is_unreachable(client, headers, agent_id):
    define(client, headers, agent_id, f"http://127.0.0.1:{closed_port()}/orders")
    report = run_test(client, headers, agent_id, parameters={"orderId": "A"}).json
    assert (report["ok"], report["statusCode"]) == (False, None)
    assert report["error"]["code"] == "function_unreachable"
    assert report["error"]["message"] == (
        "The endpoint is unreachable: The connection was refused."
    )


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"])
def test_a_test_obeys_the_address_guard_of_live_calls(
    app, client, headers, agent_id, endpoint, host
):
    """A tenant cannot probe internal hosts with tests: blocked addresses are never called."""
    define(client, headers, agent_id, f"https://{host}:{endpoint.port}/orders")
    app.config["ALLOW_PRIVATE_URLS"] = False
    report = run_test(client, headers, agent_id, parameters={"orderId": "A"}).json
    assert report["error"]["code"] == "function_unreachable"
    assert report["error"]["message"].endswith("a private or reserved address.")
    assert endpoint.requests == []


def test_unknown_agent_or_function_is_not_found(client, headers, agent_id, endpoint):
    define(client, headers, agent_id, endpoint.url + "/orders")
    error = assert_error(run_test(client, headers, agent_id, name="nope"), 404, "not_found")
    assert error["message"] == f"Function nope not found on agent {agent_id}."
    missing = run_test(client, headers, "agent_00000000000000000000")
    assert_error(missing, 404, "not_found")
    assert endpoint.requests == []


def test_another_tenants_function_is_not_found(client, headers, other_headers, agent_id, endpoint):
    define(client, headers, agent_id, endpoint.url + "/orders")
    response = run_test(client, other_headers, agent_id, parameters={"orderId": "A"})
    assert_error(response, 404, "not_found")
    assert endpoint.requests == []


def test_a_deleted_agents_function_is_not_found(client, headers, agent_id, endpoint):
    define(client, headers, agent_id, endpoint.url + "/orders")
    client.delete(f"/api/v1/agents/{agent_id}", headers=headers)
    assert_error(run_test(client, headers, agent_id), 404, "not_found")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"parameters": "orderId=A"}, "parameters"),
        ({"parameters": ["A"]}, "parameters"),
        ({"parameters": {}, "timeoutMs": 500}, "timeoutMs"),
    ],
)
def test_a_malformed_body_is_a_validation_error(client, headers, agent_id, endpoint, body, field):
    define(client, headers, agent_id, endpoint.url + "/orders")
    error = assert_error(run_test(client, headers, agent_id, **body), 422, "validation_error")
    assert list(error["details"]) == [field]
    assert endpoint.requests == []


def test_a_test_counts_against_the_rate_limit(client, headers, agent_id, endpoint):
    define(client, headers, agent_id, endpoint.url + "/orders")
    first = run_test(client, headers, agent_id, parameters={"orderId": "A"})
    second = run_test(client, headers, agent_id, parameters={"orderId": "A"})
    assert first.headers["X-RateLimit-Limit"] == "300"
    remaining = int(first.headers["X-RateLimit-Remaining"])
    assert int(second.headers["X-RateLimit-Remaining"]) == remaining - 1


def test_the_shortest_wait_outlasts_the_late_job_check():
    """A job that starts within LATE_AFTER_S of its request is surely still awaited."""
    from app.services.functions import MIN_TIMEOUT_MS

    shortest_wait = MIN_TIMEOUT_MS / 1000 + function_calls.WAIT_MARGIN_S
    assert function_calls.LATE_AFTER_S < shortest_wait
    assert function_calls.WAIT_MARGIN_S < function_calls.ANSWER_MARGIN_S


def test_a_test_repeated_with_its_idempotency_key_is_answered_again_unsent(
    client, headers, agent_id, endpoint
):
    define(client, headers, agent_id, endpoint.url + "/orders")
    keyed = {**headers, "Idempotency-Key": "test-1"}
    first = run_test(client, keyed, agent_id, parameters={"orderId": "A"})
    again = run_test(client, keyed, agent_id, parameters={"orderId": "A"})
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json == first.json
    assert len(endpoint.requests) == 1


def test_a_test_beyond_the_tenants_share_of_test_workers_is_busy_at_once(
    app, client, headers, agent_id, other_headers
):
    """A tenant whose tests hold its share of the test workers (one of the two by default)
    gets function_busy at once, without its endpoint being called, rather than waiting behind
    its own slow endpoint; another tenant's test of the same moment is made."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.runtime.test_function_calls import slow_or_quick

    assert app.config["FUNCTION_TEST_WORKERS"] * app.config["FUNCTION_TENANT_SHARE"] == 1
    with Receiver(slow_or_quick) as endpoint:
        define(client, headers, agent_id, endpoint.url + "/slow", timeout_ms=1500)
        other_agent = client.post(
            "/api/v1/agents", json={"name": "B", "systemPrompt": "Hi."}, headers=other_headers
        ).json["id"]
        define(client, other_headers, other_agent, endpoint.url + "/orders")
        with ThreadPoolExecutor(1) as pool:
            holding = pool.submit(
                run_test, app.test_client(), headers, agent_id, parameters={"orderId": "A"}
            )
            endpoint.wait_for(1)
            started = time.monotonic()
            busy = run_test(client, headers, agent_id, parameters={"orderId": "B"})
            assert time.monotonic() - started < 0.3
            other = run_test(client, other_headers, other_agent, parameters={"orderId": "C"})
            assert holding.result().json["result"] == {"status": "shipped"}
        assert len(endpoint.requests) == 2  # the first test's and the other tenant's
        report = busy.json
        assert (report["ok"], report["statusCode"], report["budgetMs"]) == (False, None, 1500)
        assert report["error"] == {
            "code": "function_busy",
            "message": "Too many of this account's function tests are running at once (at "
            "most 1); the function was not called.",
        }
        assert other.json["ok"] is True
        # The place is free again once the test in hand has its answer.
        again = run_test(client, headers, agent_id, parameters={"orderId": "D"})
        assert again.json["ok"] is True
