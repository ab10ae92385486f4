"""Function calls: the AI asks for a function mid-call, the service calls the tenant's endpoint
and hands the JSON answer back to the voice runtime, always within 5.5 s.

The web process checks the request and runs it as a job on the functions queue, waiting for
the job's return value (RQ's result); a worker sends the signed request (the endpoint gets
at most 5 s, 1 s of it to connect), records the outcome and returns it. Nothing is written
before the endpoint answers. Each invocation is recorded exactly once, by whichever side
gets there first (the worker with the answer, or the web process when the deadline passes:
the primary key settles it), and is never retried once sent.
"""

import json
import logging
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import peewee as pw
from flask import current_app

from app import jobs, metrics, outbound, queue
from app.db import database
from app.errors import Conflict, NotFound
from app.models import Call, Function, FunctionInvocation, Tenant
from app.services import events
from app.services.functions import argument_errors
from app.util import new_id, utcnow

log = logging.getLogger(__name__)

ANSWER_WITHIN_S = 5.5  # the runtime always has an answer by then
WAIT_S = 5.35  # stop waiting here, leaving time to record a timeout and answer
ENDPOINT_BUDGET_S = 5.0  # what the tenant's endpoint gets, connecting included
CONNECT_TIMEOUT_S = 1.0
SEND_MARGIN_S = 0.1  # too little time left to be worth sending
LATE_AFTER_S = 1.0  # a job starting later than this checks that its waiter still waits
BODY_METHODS = ("POST", "PUT", "PATCH")
ACTIVE_STATUSES = ("ringing", "answered")
TIMEOUT_MESSAGE = "The function did not answer within 5 seconds."


@dataclass(frozen=True)
class Outcome:
    result: dict[str, Any] | None = None
    error: dict[str, str] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"result": self.result} if self.error is None else {"error": self.error}

    @classmethod
    def failure(cls, code: str, message: str) -> "Outcome":
        return cls(error={"code": code, "message": message})

    @classmethod
    def of(cls, record: FunctionInvocation) -> "Outcome":
        if record.status == "succeeded":
            return cls(result=record.result)
        return cls.failure(record.error_code or "", record.error_message or "")


@dataclass(frozen=True)
class Invocation:
    """One function call as the runtime asked for it: what the job carries."""

    id: str
    tenant_id: str
    call_id: str
    function_id: str | None
    function_name: str
    parameters: dict[str, Any]
    started: float  # Unix time of the runtime's request

    @property
    def endpoint_deadline(self) -> float:
        return self.started + ENDPOINT_BUDGET_S


def invoke(*, call_id: str, function_name: str, parameters: dict[str, Any]) -> Outcome:
    """Run one function call for the runtime; the outcome is ready within ANSWER_WITHIN_S."""
    started = time.time()
    found = _find(call_id, function_name)
    if found is None:
        raise NotFound(f"Call {call_id} not found.")
    tenant_id, status, function_id, declared = found
    if status not in ACTIVE_STATUSES:
        raise Conflict(
            f"Call {call_id} is {status}; functions run only during a call.",
            code="call_not_active",
        )
    invocation = Invocation(
        id=new_id("fcall"),
        tenant_id=tenant_id,
        call_id=call_id,
        function_id=function_id,
        function_name=function_name,
        parameters=parameters,
        started=started,
    )
    outcome = _refusal(declared, function_name, parameters)
    if outcome is not None:
        _record(invocation, outcome, http_status=None)
    else:
        outcome = _run_and_wait(invocation)
    metrics.FUNCTION_CALLS.labels(outcome.error["code"] if outcome.error else "ok").inc()
    metrics.FUNCTION_LATENCY.observe(time.time() - started)
    return outcome


def _find(call_id: str, function_name: str) -> tuple[str, str, str | None, Any] | None:
    """The call's tenant id and status, and the id and declared parameters of its agent's
    function of that name (None, None when it has none); None when there is no such call."""
    return (
        Call.select(Call.tenant, Call.status, Function.id, Function.parameters)
        .join(
            Function,
            pw.JOIN.LEFT_OUTER,
            on=(Function.agent == Call.agent) & (Function.name == function_name),
        )
        .where(Call.id == call_id)
        .tuples()
        .first()
    )


def _refusal(declared: Any, name: str, parameters: dict[str, Any]) -> Outcome | None:
    """Why the tenant's endpoint must not be called, if it must not (declared: the function's
    parameters schema, None when the agent has no such function)."""
    if declared is None:
        return Outcome.failure("unknown_function", f"The agent has no function named {name}.")
    problems = argument_errors(declared, parameters)
    if problems:
        listed = "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in problems.items())
        return Outcome.failure("invalid_parameters", f"Invalid parameters: {listed}")
    return None


def _record(invocation: Invocation, outcome: Outcome, *, http_status: int | None) -> bool:
    """Store the invocation with its outcome and emit function.called, unless it is stored
    already (the other side got there first): False then."""
    record = dict(
        id=invocation.id,
        tenant=invocation.tenant_id,
        call=invocation.call_id,
        function=invocation.function_id,
        function_name=invocation.function_name,
        parameters=invocation.parameters,
        status="failed" if outcome.error else "succeeded",
        result=outcome.result,
        error_code=outcome.error and outcome.error["code"],
        error_message=outcome.error and outcome.error["message"],
        http_status=http_status,
        latency_ms=int((time.time() - invocation.started) * 1000),
        created_at=datetime.fromtimestamp(invocation.started, UTC).replace(tzinfo=None),
        completed_at=utcnow(),
    )
    with database.atomic():
        inserted = FunctionInvocation.insert(**record).on_conflict_ignore().as_rowcount().execute()
        if not inserted:
            return False
        Call.update(function_calls_count=Call.function_calls_count + 1).where(
            Call.id == invocation.call_id
        ).execute()
        events.emit(
            tenant_id=invocation.tenant_id,
            type="function.called",
            data={
                "callId": invocation.call_id,
                "functionName": invocation.function_name,
                "parameters": invocation.parameters,
                "result": outcome.result if outcome.error is None else {"error": outcome.error},
            },
        )
    return True


def _run_and_wait(invocation: Invocation) -> Outcome:
    """Run the job and wait for its outcome, or function_timeout once WAIT_S has passed."""
    answer = queue.call(
        "functions",
        jobs.invoke_function,
        asdict(invocation),
        timeout=max(invocation.started + WAIT_S - time.time(), 0.01),
    )
    if answer is not None:
        return Outcome(**answer)
    record = FunctionInvocation.get_or_none(FunctionInvocation.id == invocation.id)
    if record is None:
        timeout = Outcome.failure("function_timeout", TIMEOUT_MESSAGE)
        if _record(invocation, timeout, http_status=None):
            return timeout
        record = FunctionInvocation.get_by_id(invocation.id)  # the worker was first after all
    return Outcome.of(record)


def run(invocation: Invocation) -> Outcome:
    """The job: call the tenant's endpoint once, record the outcome and return it.

    If the waiter timed out meanwhile, its function_timeout was recorded first and this
    outcome is dropped, so the record always matches what the runtime was told.
    """
    # The waiter waits WAIT_S, so a job that starts within LATE_AFTER_S of the request is
    # surely awaited; only a later one looks for the function_timeout the waiter records.
    if time.time() - invocation.started > LATE_AFTER_S:
        recorded = FunctionInvocation.get_or_none(FunctionInvocation.id == invocation.id)
        if recorded is not None:
            return Outcome.of(recorded)
    function = Function.get_or_none(Function.id == invocation.function_id)
    status = None
    if function is None:
        outcome = Outcome.failure("unknown_function", "The function was deleted.")
        invocation = replace(invocation, function_id=None)
    elif invocation.endpoint_deadline - time.time() < SEND_MARGIN_S:
        outcome = Outcome.failure("function_timeout", TIMEOUT_MESSAGE)
    else:
        try:
            outcome, status = _call_endpoint(function, invocation)
        except Exception as exc:  # anything else that goes wrong is this call's failure
            log.exception("function call %s failed", invocation.id)
            message = f"The request to the endpoint failed ({type(exc).__name__})."
            outcome = Outcome.failure("function_unreachable", message)
    try:
        _record(invocation, outcome, http_status=status)
    except Exception:  # the caller still gets its answer; the record is what is lost
        log.exception("could not record function call %s", invocation.id)
    return outcome


def signed_request(
    function: Function, invocation: Invocation
) -> tuple[str, bytes | None, dict[str, str]]:
    """URL, body and headers of the request to the tenant's endpoint.

    POST, PUT and PATCH send the JSON body and sign it; GET and DELETE send the values as
    query parameters (JSON-encoded when not strings) and sign the raw query string.
    """
    payload = {
        "callId": invocation.call_id,
        "functionName": invocation.function_name,
        "parameters": invocation.parameters,
    }
    headers = {"Content-Type": "application/json"}
    if function.method in BODY_METHODS:
        body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        headers["X-Service-Signature"] = outbound.sign(function.signing_secret, body)
        return function.endpoint, body, headers
    values = {"callId": invocation.call_id, "functionName": invocation.function_name}
    for name, value in invocation.parameters.items():
        values[name] = value if isinstance(value, str) else json.dumps(value)
    query = urlencode(values)
    headers["X-Service-Signature"] = outbound.sign(function.signing_secret, query.encode())
    separator = "&" if "?" in function.endpoint else "?"
    return f"{function.endpoint}{separator}{query}", None, headers


def _call_endpoint(function: Function, invocation: Invocation) -> tuple[Outcome, int | None]:
    url, body, headers = signed_request(function, invocation)
    remaining = invocation.endpoint_deadline - time.time()
    sender = outbound.sender(current_app.config["ALLOW_PRIVATE_URLS"])
    try:
        response = sender.send(
            function.method,
            url,
            body=body,
            headers=headers,
            timeout=(min(CONNECT_TIMEOUT_S, remaining), remaining),
            total=remaining,
        )
    except outbound.OutboundTimeout:
        return Outcome.failure("function_timeout", TIMEOUT_MESSAGE), None
    except outbound.OutboundError as exc:
        return Outcome.failure("function_unreachable", f"The endpoint is unreachable: {exc}"), None
    if not 200 <= response.status_code < 300:
        return Outcome.failure(
            "function_http_error", f"The endpoint answered HTTP {response.status_code}."
        ), response.status_code
    try:
        answer = json.loads(response.body) if not response.truncated else None
        # Stored as UTF-8 text: an unpaired surrogate escape could not be.
        json.dumps(answer, ensure_ascii=False).encode()
    except (ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        answer = None
    if not isinstance(answer, dict):
        return Outcome.failure(
            "function_invalid_response", "The endpoint must answer with a JSON object."
        ), response.status_code
    return Outcome(result=answer), response.status_code


def list_for_call(*, tenant: Tenant, call_id: str) -> list[FunctionInvocation]:
    """The function calls the AI made during the call, in the order it made them."""
    return list(
        FunctionInvocation.select()
        .where((FunctionInvocation.call == call_id) & (FunctionInvocation.tenant == tenant))
        .order_by(FunctionInvocation.created_at, FunctionInvocation.id)
    )
