"""The runtime API client against the real service (gunicorn, worker.py, Redis), and against
real sockets that misbehave: what it answers, what it raises, and what it repeats."""

import asyncio
import socket
import threading
import time

import pytest

from tests.bridge.stack import PARAMETERS, api, set_up_line
from tests.call_flow import backdate
from tests.conftest import RUNTIME_TOKEN
from tests.helpers import ACTOR
from tests.system.workers import free_port
from voiceagent_bridge.client import (
    CallNotActive,
    ConcurrencyLimit,
    Conflict,
    IllegalTransition,
    NoAgent,
    NoCredits,
    NotFound,
    RetryPolicy,
    RuntimeAPIError,
    RuntimeClient,
    RuntimeDisabled,
    ServiceUnavailable,
    Turn,
    Unauthorized,
    ValidationFailed,
    error_from_answer,
)

pytestmark = pytest.mark.slow

CALLER = "+6281200000001"
FAST = RetryPolicy(attempts=3, first_delay_s=0.01)
SLOW = RetryPolicy(attempts=3, first_delay_s=0.2)


def client_of(service, **options) -> RuntimeClient:
    return RuntimeClient(service.base_url, RUNTIME_TOKEN, **options)


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 30))


@pytest.fixture(scope="module")
def line(service):
    """A number answered by an agent with one function, 100 minutes of credit."""
    function = {
        "name": "lookup_order",
        "description": "Look up an order.",
        "endpoint": service.endpoint.url + "/orders",
        "parameters": PARAMETERS,
    }
    agent = {"name": "Client", "systemPrompt": "Be brief.", "greetingText": "Halo."}
    return set_up_line(
        service.base_url, name="client", did="+6221555201", agent=agent, functions=[function]
    )


def test_a_started_call_comes_with_its_session(service, line):
    async def start():
        async with client_of(service) as client:
            return await client.start_call(did=line.did, caller_number=CALLER)

    started = run(start())
    assert started.created and started.call.status == "ringing"
    assert (started.call.caller_number, started.call.callee_number) == (CALLER, line.did)
    session = started.session
    assert (session.agent_id, session.system_prompt, session.greeting_text) == (
        line.agent_id,
        "Be brief.",
        "Halo.",
    )
    assert session.max_call_duration_seconds == 600  # the agent's 10 minutes
    assert session.agent_version == 2  # created, then its function
    (function,) = session.functions
    assert (function.name, function.parameters) == ("lookup_order", PARAMETERS)
    assert function.timeout_ms == 5000  # the function's default timeoutMs
    assert session.function("lookup_order") is function and session.function("other") is None


def test_a_repeated_provider_call_id_answers_the_call_recorded_first(service, line):
    async def start_twice():
        async with client_of(service) as client:
            first = await client.start_call(
                did=line.did, caller_number=CALLER, provider_call_id="CA-repeat"
            )
            again = await client.start_call(
                did=line.did, caller_number=CALLER, provider_call_id="CA-repeat"
            )
            return first, again

    first, again = run(start_twice())
    assert first.created and not again.created and again.call.id == first.call.id


def test_a_call_is_answered_summarised_and_ended_once(service, line):
    async def whole_call():
        async with client_of(service) as client:
            call = (await client.start_call(did=line.did, caller_number=CALLER)).call
            answered = await client.answer_call(call.id)
            summarised = await client.add_transcript(call.id, summary="Asked about an order.")
            outcome = await client.invoke_function(call.id, "lookup_order", {"orderId": "A-1"})
            unknown = await client.invoke_function(call.id, "nothing", {})
            backdate(call.id, 70)  # through the service's database: it lived its 70 s
            ended = [
                await client.end_call(
                    call.id,
                    status="ended",
                    duration_seconds=70,
                    talk_time_seconds=65,
                    hangup_reason="normal",
                    hangup_initiator="caller",
                    ai_cost_idr=300,
                    metadata={"usage": {"tts": {"characters": 12}}},
                )
                for _ in range(2)
            ]
            return answered, summarised, outcome, unknown, ended

    answered, summarised, outcome, unknown, ended = run(whole_call())
    assert answered.status == "answered" and answered.answered_at is not None
    assert summarised.transcript_summary == "Asked about an order."
    assert outcome.result == {"orderId": "A-1", "status": "shipped"} and outcome.error is None
    assert outcome.for_llm() == outcome.result
    assert unknown.error is not None and unknown.error.code == "unknown_function"
    assert unknown.for_llm() == {
        "error": {"code": "unknown_function", "message": "The agent has no function named nothing."}
    }
    assert ended[0] == ended[1]
    assert (ended[0].status, ended[0].billed_minutes, ended[0].talk_time_seconds) == (
        "ended",
        2,
        65,
    )
    assert ended[0].metadata == {"usage": {"tts": {"characters": 12}}}
    credits = api(service.base_url, line.api_key, "GET", "/credits")
    assert credits["lifetimeUsedMinutes"] == 2  # charged once


def test_steps_an_ended_call_cannot_take_raise_their_conflicts(service, line):
    async def after_the_end():
        async with client_of(service) as client:
            call = (await client.start_call(did=line.did, caller_number=CALLER)).call
            await client.end_call(
                call.id,
                status="failed",
                duration_seconds=3,
                talk_time_seconds=0,
                hangup_reason="no_answer",
                hangup_initiator="callee",
            )
            errors = []
            for step in (
                client.answer_call(call.id),
                client.invoke_function(call.id, "lookup_order", {"orderId": "A-2"}),
            ):
                with pytest.raises(Conflict) as raised:
                    await step
                errors.append(raised.value)
            return errors

    answered, function = run(after_the_end())
    assert isinstance(answered, IllegalTransition) and answered.status == 409
    assert answered.code == "illegal_transition" and answered.details == {"status": "failed"}
    assert isinstance(function, CallNotActive) and function.code == "call_not_active"


def test_a_call_the_service_turns_away_raises_why(service, line):
    from app.services import phone_numbers as number_service
    from app.services import tenants as tenant_service

    tenant = tenant_service.find_tenant(line.tenant_id)
    number_service.add_number(
        actor=ACTOR, tenant=tenant, display_number="+6221555202"
    )  # no agent on it
    broke = set_up_line(
        service.base_url,
        name="broke",
        did="+6221555203",
        agent={"name": "Broke", "systemPrompt": "Be brief."},
        minutes=0,
    )

    async def start(did):
        async with client_of(service) as client:
            with pytest.raises(RuntimeAPIError) as raised:
                await client.start_call(did=did, caller_number=CALLER)
            return raised.value

    no_agent, no_credits = run(start("+6221555202")), run(start(broke.did))
    assert isinstance(no_agent, NoAgent) and no_agent.call_id.startswith("call_")
    assert isinstance(no_credits, NoCredits) and no_credits.call_id.startswith("call_")
    assert no_credits.request_id.startswith("req_") and "no_credits" in str(no_credits)


def test_invalid_fields_and_unknown_calls_raise_their_errors(service, line):
    async def mistakes():
        async with client_of(service) as client:
            with pytest.raises(ValidationFailed) as invalid:
                await client.start_call(did=line.did, caller_number="12345")
            with pytest.raises(NotFound) as missing:
                await client.answer_call("call_doesnotexist")
            return invalid.value, missing.value

    invalid, missing = run(mistakes())
    assert invalid.status == 422 and list(invalid.details) == ["callerNumber"]
    assert invalid.unknown_fields == set()
    assert missing.status == 404 and missing.code == "not_found"


def test_a_wrong_token_raises_unauthorized(service, line):
    async def start():
        async with RuntimeClient(service.base_url, "not-the-token") as client:
            await client.start_call(did=line.did, caller_number=CALLER)

    with pytest.raises(Unauthorized) as raised:
        run(start())
    assert raised.value.status == 401


# -- what is repeated ---------------------------------------------------------------------------


class Misbehaving:
    """A real TCP server that reads each request and then drops the connection (answer
    None) or answers it with a status, counting the requests it read."""

    def __init__(self, answer: int | None = None) -> None:
        self.answer = answer
        self.requests = 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> "Misbehaving":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.close()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = connection.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                self.requests += 1
                if self.answer is not None:
                    body = b'{"error": {"code": "internal_error", "message": "Boom."}}'
                    connection.sendall(
                        f"HTTP/1.1 {self.answer} Oops\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                        + body
                    )


# Each kind of request, and whether a repeat of it is harmless.
OPERATIONS = {
    "start with providerCallId": (
        lambda c: c.start_call(did="+6221555000", caller_number=CALLER, provider_call_id="CA1"),
        True,
    ),
    "start without": (lambda c: c.start_call(did="+6221555000", caller_number=CALLER), False),
    "answered": (lambda c: c.answer_call("call_x"), True),
    "summary": (lambda c: c.add_transcript("call_x", summary="Hi."), True),
    "turns": (lambda c: c.add_transcript("call_x", turns=[Turn("caller", "Hi.")]), False),
    "function call": (lambda c: c.invoke_function("call_x", "f", {}, timeout_ms=500), False),
    "ended": (
        lambda c: c.end_call(
            "call_x",
            status="ended",
            duration_seconds=1,
            talk_time_seconds=1,
            hangup_reason="normal",
            hangup_initiator="caller",
        ),
        True,
    ),
    "dispatch": (lambda c: c.dispatch(max_calls=1), False),
}


def attempts_of(
    url: str, name: str, retry: RetryPolicy = FAST
) -> tuple[type[RuntimeAPIError], bool]:
    """Make the request named name; the exception it raised, and whether it is harmless."""
    request, idempotent = OPERATIONS[name]

    async def attempt():
        async with RuntimeClient(url, "t", retry=retry) as client:
            with pytest.raises(RuntimeAPIError) as raised:
                await request(client)
            return type(raised.value)

    return run(attempt()), idempotent


@pytest.mark.parametrize("name", OPERATIONS)
def test_a_request_that_got_no_answer_is_repeated_only_when_harmless(name):
    with Misbehaving() as server:
        error, idempotent = attempts_of(server.url, name)
    assert error is ServiceUnavailable
    assert server.requests == (FAST.attempts if idempotent else 1)


@pytest.mark.parametrize("name", OPERATIONS)
def test_a_5xx_answer_is_repeated_only_when_harmless(name):
    with Misbehaving(answer=502) as server:
        error, idempotent = attempts_of(server.url, name)
    assert error is ServiceUnavailable
    assert server.requests == (FAST.attempts if idempotent else 1)


@pytest.mark.parametrize("name", OPERATIONS)
def test_a_request_that_could_not_connect_is_repeated_whatever_it_is(name):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there: refused at once
    started = time.monotonic()
    error, _ = attempts_of(url, name, SLOW)
    # Nothing was sent, so every request waited out the pauses between its attempts.
    assert error is ServiceUnavailable
    assert time.monotonic() - started >= SLOW.delay(1) + SLOW.delay(2)


# -- the error body -----------------------------------------------------------------------------


def body(code: str, **details) -> dict:
    return {"error": {"code": code, "message": "Why.", "details": details, "requestId": "req_1"}}


@pytest.mark.parametrize(
    ("status", "code", "kind"),
    [
        (409, "no_agent", NoAgent),
        (409, "no_credits", NoCredits),
        (409, "concurrency_limit", ConcurrencyLimit),
        (409, "illegal_transition", IllegalTransition),
        (409, "call_not_active", CallNotActive),
        (409, "conflict", Conflict),
        (401, "unauthorized", Unauthorized),
        (404, "not_found", NotFound),
        (422, "validation_error", ValidationFailed),
        (503, "runtime_disabled", RuntimeDisabled),
        (500, "internal_error", ServiceUnavailable),
        (418, "teapot", RuntimeAPIError),
    ],
)
def test_each_error_code_becomes_its_exception(status, code, kind):
    error = error_from_answer(status, body(code, callId="call_1"))
    assert type(error) is kind
    assert (error.status, error.code, error.message, error.request_id) == (
        status,
        code,
        "Why.",
        "req_1",
    )


def test_a_rejected_start_names_its_call_and_an_older_service_its_unknown_fields():
    limited = error_from_answer(409, body("concurrency_limit", callId="call_9"))
    assert isinstance(limited, ConcurrencyLimit) and limited.call_id == "call_9"
    older = error_from_answer(
        422, body("validation_error", turns=["Unknown field."], text=["Too long."])
    )
    assert isinstance(older, ValidationFailed) and older.unknown_fields == {"turns"}


def test_an_answer_without_an_error_body_still_raises_by_its_status():
    assert type(error_from_answer(404, None)) is NotFound
    assert type(error_from_answer(502, "<html>Bad gateway</html>")) is ServiceUnavailable
