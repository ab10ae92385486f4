"""Function calls through the runtime API, against real endpoints on 127.0.0.1 (inline mode).

The same calls through a real worker.py process are in tests/system/test_function_worker.py.
"""

import hashlib
import hmac
import json
import socket
import time
from urllib.parse import parse_qsl, urlsplit

import pytest

from app.models import AgentVersion, Event, Function, FunctionInvocation
from app.services import snapshots
from tests.call_flow import RUNTIME, answer, end, start
from tests.helpers import ACTOR, assert_error
from tests.receiver import Answer, Receiver

SECRET = "fsec-test-secret-0123456789"
PARAMETERS = {
    "type": "object",
    "properties": {
        "orderId": {"type": "string", "description": "Order number."},
        "quantity": {"type": "integer", "description": "How many."},
        "express": {"type": "boolean", "description": "Express?"},
    },
    "required": ["orderId"],
}


def echo(request):
    """Answer with what arrived, so the test sees the service's request from both sides."""
    path = urlsplit(request.path)
    if path.path == "/sleep":
        return Answer(delay=7, body=b"{}")
    if path.path == "/text":
        return Answer(body=b"plain text, not JSON")
    if path.path == "/array":
        return Answer(body=b"[1, 2]")
    if path.path == "/deep":  # deeper than the JSON decoder's recursion limit
        return Answer(body=b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}")
    if path.path == "/surrogate":  # an unpaired surrogate cannot be stored as UTF-8
        return Answer(body=b'{"name": "\\ud800"}')
    if path.path == "/fail":
        return Answer(status=500, body=b'{"error": "boom"}')
    if path.path == "/missing":
        return Answer(status=404, body=b'{"error": "no such order"}')
    return Answer(
        body=json.dumps(
            {"status": "shipped", "echo": request.body.decode() or path.query}
        ).encode(),
        headers={"Content-Type": "application/json"},
    )


@pytest.fixture
def endpoint():
    with Receiver(echo) as receiver:
        yield receiver


def define(client, headers, agent_id, url, *, name="lookup_order", method="POST", timeout_ms=None):
    fields = {"timeoutMs": timeout_ms} if timeout_ms is not None else {}
    response = client.post(
        f"/api/v1/agents/{agent_id}/functions",
        json={
            "name": name,
            "description": "Look up an order.",
            "endpoint": url,
            "method": method,
            "parameters": PARAMETERS,
            "secret": SECRET,
            **fields,
        },
        headers=headers,
    )
    assert response.status_code == 201, response.get_data(as_text=True)


@pytest.fixture
def open_call(client, runtime_headers, did):
    """Starts and answers a call, which is answered with its agent's version then: a test
    defines the functions the call uses first."""

    def open_call():
        call = start(client, runtime_headers, did).json["id"]
        assert answer(client, runtime_headers, call).status_code == 200
        return call

    return open_call


@pytest.fixture
def call_id(open_call):
    return open_call()


def invoke(client, runtime_headers, call_id, name="lookup_order", **parameters):
    started = time.monotonic()
    response = client.post(
        f"{RUNTIME}/{call_id}/function-calls",
        json={"functionName": name, "parameters": parameters},
        headers=runtime_headers,
    )
    elapsed = time.monotonic() - started
    assert elapsed < 5.5, f"answered after {elapsed:.2f} s"
    return response


def test_post_function_is_signed_and_its_json_comes_back(
    client, headers, runtime_headers, agent_id, open_call, endpoint
):
    define(client, headers, agent_id, endpoint.url + "/orders")
    call_id = open_call()
    response = invoke(client, runtime_headers, call_id, orderId="A-17", quantity=2)
    assert response.status_code == 200
    [request] = endpoint.requests
    assert (request.method, request.path) == ("POST", "/orders")
    assert request.headers["Content-Type"] == "application/json"
    assert request.json() == {
        "callId": call_id,
        "functionName": "lookup_order",
        "parameters": {"orderId": "A-17", "quantity": 2},
    }
    expected = hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Service-Signature"] == f"sha256={expected}"
    assert request.headers["User-Agent"].startswith("VoiceAgentAPI/")
    assert response.json == {"result": {"status": "shipped", "echo": request.body.decode()}}


def test_get_function_sends_and_signs_the_query_string(
    client, headers, runtime_headers, agent_id, open_call, endpoint
):
    define(client, headers, agent_id, endpoint.url + "/orders", method="GET")
    call_id = open_call()
    response = invoke(client, runtime_headers, call_id, orderId="A 17", express=True)
    assert "result" in response.json
    [request] = endpoint.requests
    path = urlsplit(request.path)
    assert request.method == "GET" and request.body == b""
    assert dict(parse_qsl(path.query)) == {
        "callId": call_id,
        "functionName": "lookup_order",
        "orderId": "A 17",
        "express": "true",
    }
    expected = hmac.new(SECRET.encode(), path.query.encode(), hashlib.sha256).hexdigest()
    assert request.headers["X-Service-Signature"] == f"sha256={expected}"


def test_invocation_is_recorded_counted_and_emits_function_called(
    client, headers, runtime_headers, agent_id, open_call, endpoint
):
    define(client, headers, agent_id, endpoint.url + "/orders")
    call_id = open_call()
    invoke(client, runtime_headers, call_id, orderId="A-17")
    record = FunctionInvocation.get()
    assert (record.status, record.http_status, record.function_name) == (
        "succeeded",
        200,
        "lookup_order",
    )
    assert record.latency_ms is not None and record.parameters == {"orderId": "A-17"}
    detail = client.get(f"/api/v1/calls/{call_id}", headers=headers).json
    assert detail["functionCalls"] == 1
    event = Event.get(Event.type == "function.called")
    assert event.data["callId"] == call_id
    assert event.data["functionName"] == "lookup_order"
    assert event.data["parameters"] == {"orderId": "A-17"}
    assert event.data["result"]["status"] == "shipped"


@pytest.mark.parametrize(
    ("parameters", "field"),
    [
        ({}, "orderId"),
        ({"orderId": 17}, "orderId"),
        ({"orderId": "A", "quantity": "2"}, "quantity"),
        ({"orderId": "A", "colour": "red"}, "colour"),
    ],
)
def test_bad_parameters_never_reach_the_endpoint(
    client, headers, runtime_headers, agent_id, open_call, endpoint, parameters, field
):
    define(client, headers, agent_id, endpoint.url + "/orders")
    call_id = open_call()
    response = invoke(client, runtime_headers, call_id, **parameters)
    assert response.status_code == 200
    assert response.json["error"]["code"] == "invalid_parameters"
    assert field in response.json["error"]["message"]
    assert endpoint.requests == []
    assert Event.get(Event.type == "function.called").data["result"]["error"]["code"] == (
        "invalid_parameters"
    )


def test_unknown_function(client, runtime_headers, call_id):
    response = invoke(client, runtime_headers, call_id, name="nope")
    assert response.json["error"]["code"] == "unknown_function"


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/sleep", "function_timeout"),
        ("/text", "function_invalid_response"),
        ("/array", "function_invalid_response"),
        ("/deep", "function_invalid_response"),
        ("/surrogate", "function_invalid_response"),
        ("/fail", "function_http_error"),
    ],
)
def test_endpoint_failures_give_their_code_in_time(
    client, headers, runtime_headers, agent_id, open_call, endpoint, path, code
):
    define(client, headers, agent_id, endpoint.url + path)
    call_id = open_call()
    response = invoke(client, runtime_headers, call_id, orderId="A")
    assert response.status_code == 200
    assert set(response.json) == {"error"}
    assert response.json["error"]["code"] == code
    assert len(endpoint.requests) == 1  # never retried


def test_a_slow_endpoint_times_out_at_the_default_budget_of_5_s(
    client, headers, runtime_headers, agent_id, open_call, endpoint
):
    define(client, headers, agent_id, endpoint.url + "/sleep")
    call_id = open_call()
    response = invoke(client, runtime_headers, call_id, orderId="A")
    assert response.json == {
        "error": {"code": "function_timeout", "message": "The function did not answer within 5 s."}
    }
    assert 4950 <= FunctionInvocation.get().latency_ms <= 5500


def slow_or_quick(request):
    """/slow answers after a second."""
    if urlsplit(request.path).path == "/slow":
        return Answer(delay=1.0, body=b'{"status": "shipped"}')
    return echo(request)


@pytest.mark.parametrize(
    ("timeout_ms", "code"), [(500, "function_timeout"), (2000, None), (5000, None)]
)
def test_a_call_keeps_to_its_functions_timeout(
    client, headers, runtime_headers, agent_id, open_call, timeout_ms, code
):
    with Receiver(slow_or_quick) as slow:
        define(client, headers, agent_id, slow.url + "/slow", timeout_ms=timeout_ms)
        call_id = open_call()
        started = time.monotonic()
        response = invoke(client, runtime_headers, call_id, orderId="A")
        elapsed = time.monotonic() - started
    record = FunctionInvocation.get()
    if code is None:
        assert response.json == {"result": {"status": "shipped"}}
        assert record.status == "succeeded"
    else:
        assert response.json["error"] == {
            "code": code,
            "message": f"The function did not answer within {timeout_ms / 1000:g} s.",
        }
        assert timeout_ms - 50 <= record.latency_ms <= timeout_ms + 500
        assert elapsed < timeout_ms / 1000 + 0.5


def test_a_changed_timeout_holds_from_the_next_call(
    client, headers, runtime_headers, agent_id, open_call
):
    """A call keeps the timeout of the version it was answered with; the next call has the
    changed one."""
    with Receiver(slow_or_quick) as slow:
        define(client, headers, agent_id, slow.url + "/slow", timeout_ms=2000)
        first = open_call()
        client.patch(
            f"/api/v1/agents/{agent_id}/functions/lookup_order",
            json={"timeoutMs": 600},
            headers=headers,
        )
        second = open_call()
        started = time.monotonic()
        response = invoke(client, runtime_headers, second, orderId="A")
        assert time.monotonic() - started < 0.6 + 0.5
        assert response.json["error"]["message"] == "The function did not answer within 0.6 s."
        assert invoke(client, runtime_headers, first, orderId="A").json == {
            "result": {"status": "shipped"}
        }


def test_refused_connection_is_unreachable(client, headers, runtime_headers, agent_id, open_call):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    define(client, headers, agent_id, f"http://127.0.0.1:{port}/orders")
    call_id = open_call()
    response = invoke(client, runtime_headers, call_id, orderId="A")
    assert response.json["error"]["code"] == "function_unreachable"


def test_private_endpoint_is_unreachable_when_private_urls_are_off(
    app, client, headers, runtime_headers, agent_id, open_call, endpoint
):
    define(client, headers, agent_id, endpoint.url + "/orders")
    call_id = open_call()
    app.config["ALLOW_PRIVATE_URLS"] = False
    response = invoke(client, runtime_headers, call_id, orderId="A")
    assert response.json["error"]["code"] == "function_unreachable"
    assert endpoint.requests == []


def test_stored_endpoint_with_no_host_name_is_unreachable_at_once(
    client, headers, runtime_headers, agent_id, open_call, endpoint
):
    define(client, headers, agent_id, endpoint.url + "/orders")
    # Written directly: registration refuses this URL (tests/resources/test_functions.py).
    Function.update(endpoint="https://a..b/x").execute()
    version = AgentVersion.get(AgentVersion.agent == agent_id, AgentVersion.version == 2)
    entry = {**version.functions[0], "endpoint": "https://a..b/x"}
    version.function_digests = snapshots.store_definitions(agent_id, [entry])
    version.save()
    call_id = open_call()
    started = time.monotonic()
    response = invoke(client, runtime_headers, call_id, orderId="A")
    assert time.monotonic() - started < 1
    assert response.json["error"]["code"] == "function_unreachable"
    assert "not a valid host name" in response.json["error"]["message"]
    assert endpoint.requests == []


def test_function_call_on_ended_call_is_conflict(
    client, headers, runtime_headers, agent_id, open_call, endpoint
):
    define(client, headers, agent_id, endpoint.url + "/orders")
    call_id = open_call()
    end(client, runtime_headers, call_id)
    error = assert_error(
        invoke(client, runtime_headers, call_id, orderId="A"), 409, "call_not_active"
    )
    assert call_id in error["message"]


def test_function_call_on_unknown_call_is_not_found(client, runtime_headers):
    assert_error(invoke(client, runtime_headers, "call_nope"), 404, "not_found")


def test_function_call_needs_the_runtime_token(client, headers, call_id):
    response = client.post(
        f"{RUNTIME}/{call_id}/function-calls", json={"functionName": "x"}, headers=headers
    )
    assert_error(response, 401, "unauthorized")


def test_function_call_requires_a_name(client, runtime_headers, call_id):
    response = client.post(
        f"{RUNTIME}/{call_id}/function-calls", json={"parameters": {}}, headers=runtime_headers
    )
    assert list(assert_error(response, 422, "validation_error")["details"]) == ["functionName"]


def test_an_invocation_is_recorded_once_by_whichever_side_is_first(
    client, headers, runtime_headers, agent_id, call_id, endpoint
):
    """The worker's answer and the waiter's timeout race to record; the first one stands."""
    from app.services import function_calls

    invocation = function_calls.Invocation(
        id="fcall_race",
        tenant_id=Event.select().get().tenant_id,
        call_id=call_id,
        function_id=None,
        function_name="lookup_order",
        parameters={"orderId": "A"},
        started=time.time(),
    )
    answered = function_calls.Outcome(result={"status": "shipped"})
    timeout = function_calls.Outcome.failure("function_timeout", "late")
    assert function_calls.record(invocation, answered, http_status=200) is True
    assert function_calls.record(invocation, timeout, http_status=None) is False
    record = FunctionInvocation.get_by_id("fcall_race")
    assert (record.status, record.result) == ("succeeded", {"status": "shipped"})
    assert Event.select().where(Event.type == "function.called").count() == 1
    detail = client.get(f"/api/v1/calls/{call_id}", headers=headers).json
    assert detail["functionCalls"] == 1


def job_for(call_id, function_id, *, started):
    from app.services import function_calls

    return function_calls.Invocation(
        id="fcall_job",
        tenant_id=Event.select().get().tenant_id,
        call_id=call_id,
        function_id=function_id,
        function_name="lookup_order",
        parameters={"orderId": "A"},
        started=started,
    )


def test_a_job_whose_function_was_deleted_records_unknown_function(call_id, endpoint):
    from app.services import function_calls

    function_calls.run(job_for(call_id, "fn_gone", started=time.time()))
    record = FunctionInvocation.get_by_id("fcall_job")
    assert (record.error_code, record.function_id) == ("unknown_function", None)
    assert endpoint.requests == []


def test_a_late_job_sends_nothing_and_records_a_timeout(
    client, headers, agent_id, open_call, endpoint
):
    from app.models import Function
    from app.services import function_calls

    define(client, headers, agent_id, endpoint.url + "/orders")
    call_id = open_call()
    function_calls.run(job_for(call_id, Function.get().id, started=time.time() - 6))
    assert FunctionInvocation.get_by_id("fcall_job").error_code == "function_timeout"
    assert endpoint.requests == []


def test_a_call_beyond_the_tenants_share_of_workers_is_busy_at_once(
    app, client, headers, runtime_headers, agent_id, open_call, other_tenant, other_headers
):
    """A tenant whose calls hold its share of the function workers (one of two here) gets
    function_busy at once, recorded like any outcome, without its endpoint being called;
    another tenant's call of the same moment is made."""
    from concurrent.futures import ThreadPoolExecutor

    from app.services import billing
    from app.services import phone_numbers as number_service

    app.config.update(FUNCTION_WORKERS=2, FUNCTION_TENANT_SHARE=0.5)
    with Receiver(slow_or_quick) as endpoint:
        define(client, headers, agent_id, endpoint.url + "/slow", timeout_ms=1500)
        call_id = open_call()
        other_agent = client.post(
            "/api/v1/agents", json={"name": "B", "systemPrompt": "Hi."}, headers=other_headers
        ).json["id"]
        define(client, other_headers, other_agent, endpoint.url + "/quick")
        number = number_service.add_number(
            actor=ACTOR, tenant=other_tenant, display_number="+6221555302"
        )
        number_service.assign_agent(
            actor=ACTOR, tenant=other_tenant, number_id=number.id, agent_id=other_agent
        )
        billing.grant(actor=ACTOR, tenant=other_tenant, minutes=10)
        other_call = start(client, runtime_headers, "+6221555302").json["id"]
        answer(client, runtime_headers, other_call)
        with ThreadPoolExecutor(1) as pool:
            holding = pool.submit(invoke, app.test_client(), runtime_headers, call_id, orderId="A")
            endpoint.wait_for(1)
            started = time.monotonic()
            busy = invoke(client, runtime_headers, call_id, orderId="B")
            assert time.monotonic() - started < 1.0  # not after the 1.5 s the first one holds
            other = invoke(client, runtime_headers, other_call, orderId="C")
            assert holding.result().json == {"result": {"status": "shipped"}}
        assert len(endpoint.requests) == 2  # the first call's and the other tenant's
    assert busy.status_code == 200
    assert busy.json == {
        "error": {
            "code": "function_busy",
            "message": "Too many of this account's function calls are running at once (at "
            "most 1); the function was not called.",
        }
    }
    assert other.json["result"]["status"] == "shipped"
    codes = [record.error_code for record in FunctionInvocation.select()]
    assert sorted(codes, key=str) == sorted([None, None, "function_busy"], key=str)
    # The place is free again once the call in hand has its answer.
    assert invoke(client, runtime_headers, call_id, orderId="D").json["result"]
