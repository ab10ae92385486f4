"""Function calls: the AI asks for a function mid-call, the service calls the tenant's endpoint
and hands the JSON answer back to the voice runtime, always within 5.5 s.

The web process records the invocation and puts it on the functions queue; a worker sends
the signed request (the endpoint gets at most 5 s, 1 s of it to connect), hands the outcome
to the waiting web process through Redis, then records it (inline, without Redis, it records
it first and the web process reads the database). An invocation is finished exactly once, by
whichever side records first (the worker with the answer, or the web process when the
deadline passes), and is never retried once sent.
"""

import json
import logging
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from flask import current_app
from redis import RedisError

from app import metrics, outbound, queue
from app.db import raw_sql
from app.errors import Conflict, NotFound
from app.models import Call, Function, FunctionInvocation
from app.services import events
from app.services.functions import argument_errors
from app.util import new_id, utcnow

log = logging.getLogger(__name__)

ANSWER_WITHIN_S = 5.5  # the runtime always has an answer by then
WAIT_S = 5.35  # stop waiting here, leaving time to record a timeout and answer
ENDPOINT_BUDGET_S = 5.0  # what the tenant's endpoint gets, connecting included
CONNECT_TIMEOUT_S = 1.0
SEND_MARGIN_S = 0.1  # too little time left to be worth sending
RESULT_KEY = "voiceagent:function-result:"
RECORD_ATTEMPTS = 3  # the worker's tries at recording an outcome it has already handed over
BODY_METHODS = ("POST", "PUT", "PATCH")
ACTIVE_STATUSES = ("ringing", "answered")


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
    def of(cls, invocation: FunctionInvocation) -> "Outcome":
        if invocation.status == "succeeded":
            return cls(result=invocation.result)
        return cls.failure(invocation.error_code or "", invocation.error_message or "")


def invoke(*, call_id: str, function_name: str, parameters: dict[str, Any]) -> Outcome:
    """Run one function call for the runtime; the outcome is ready within ANSWER_WITHIN_S."""
    started = time.time()
    call = Call.find(call_id)
    if call is None:
        raise NotFound(f"Call {call_id} not found.")
    if call.status not in ACTIVE_STATUSES:
        raise Conflict(
            f"Call {call_id} is {call.status}; functions run only during a call.",
            code="call_not_active",
        )
    function = find_function(call.agent_id, function_name)
    with queue.transaction():
        invocation = FunctionInvocation.create(
            id=new_id("fcall"),
            tenant=call.tenant_id,
            call=call.id,
            function=function,
            function_name=function_name,
            parameters=parameters,
        )
        refused = _refusal(function, function_name, parameters)
        if refused is not None:
            _finish(invocation.id, refused, http_status=None, started=started)
        else:
            queue.defer(
                "functions",
                "app.jobs.invoke_function",
                invocation.id,
                started + ENDPOINT_BUDGET_S,
            )
    if refused is not None:
        outcome = refused
    else:
        outcome = _wait(invocation.id, deadline=started + WAIT_S)
    metrics.FUNCTION_CALLS.labels(outcome.error["code"] if outcome.error else "ok").inc()
    metrics.FUNCTION_LATENCY.observe(time.time() - started)
    return outcome


def find_function(agent_id: str | None, name: str) -> Function | None:
    """The agent's function of that name (fixed SQL: this is on the caller's wait)."""
    sql = raw_sql('SELECT * FROM "function" WHERE "agent_id" = ? AND "name" = ?')
    return next(iter(Function.raw(sql, agent_id, name)), None)


def _refusal(function: Function | None, name: str, parameters: dict[str, Any]) -> Outcome | None:
    """Why the tenant's endpoint must not be called, if it must not."""
    if function is None:
        return Outcome.failure("unknown_function", f"The agent has no function named {name}.")
    problems = argument_errors(function.parameters, parameters)
    if problems:
        listed = "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in problems.items())
        return Outcome.failure("invalid_parameters", f"Invalid parameters: {listed}")
    return None


def _finish(
    invocation_id: str, outcome: Outcome, *, http_status: int | None, started: float
) -> bool:
    """Record the outcome and emit function.called, unless the invocation is already finished."""
    with queue.transaction():
        now = utcnow()
        changed = (
            FunctionInvocation.update(
                status="failed" if outcome.error else "succeeded",
                result=outcome.result,
                error_code=outcome.error and outcome.error["code"],
                error_message=outcome.error and outcome.error["message"],
                http_status=http_status,
                latency_ms=int((time.time() - started) * 1000),
                completed_at=now,
            )
            .where(
                (FunctionInvocation.id == invocation_id) & (FunctionInvocation.status == "pending")
            )
            .execute()
        )
        if not changed:
            return False
        invocation = FunctionInvocation.get_by_id(invocation_id)
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


def _wait(invocation_id: str, *, deadline: float) -> Outcome:
    """The invocation's outcome, or function_timeout once the deadline has passed."""
    if current_app.config["QUEUE_MODE"] == "rq":
        remaining = deadline - time.time()
        try:
            answer = queue.redis_connection(blocking=True).blpop(
                [RESULT_KEY + invocation_id], timeout=max(remaining, 0.01)
            )
        except RedisError:
            answer = None
        if answer is not None:
            return Outcome(**json.loads(answer[1]))
    invocation = FunctionInvocation.get_by_id(invocation_id)
    if invocation.status == "pending":
        timeout = Outcome.failure(
            "function_timeout", "The function did not answer within 5 seconds."
        )
        started = deadline - WAIT_S
        if _finish(invocation_id, timeout, http_status=None, started=started):
            return timeout
        invocation = FunctionInvocation.get_by_id(invocation_id)
    return Outcome.of(invocation)


def run(invocation_id: str, endpoint_deadline: float) -> None:
    """The job: call the tenant's endpoint once, record the outcome, hand it to the waiter."""
    invocation = FunctionInvocation.find(invocation_id)
    if invocation is None or invocation.status != "pending":
        return
    started = endpoint_deadline - ENDPOINT_BUDGET_S
    function = Function.find(invocation.function_id)
    if function is None:
        outcome, status = Outcome.failure("unknown_function", "The function was deleted."), None
    elif endpoint_deadline - time.time() < SEND_MARGIN_S:
        outcome, status = (
            Outcome.failure("function_timeout", "The function did not answer within 5 seconds."),
            None,
        )
    else:
        outcome, status = _call_endpoint(function, invocation, endpoint_deadline)
    # The caller is waiting on the line: hand the answer over first, then record it. If the
    # web process timed out meanwhile, its function_timeout is recorded first and this
    # answer is dropped, so the record always matches what the runtime was told.
    _publish(invocation_id, outcome)
    _record(invocation_id, outcome, http_status=status, started=started)


def _record(
    invocation_id: str, outcome: Outcome, *, http_status: int | None, started: float
) -> None:
    """_finish, tried again a few times: the outcome has been handed over already."""
    for attempt in range(1, RECORD_ATTEMPTS + 1):
        try:
            _finish(invocation_id, outcome, http_status=http_status, started=started)
            return
        except Exception:
            if attempt == RECORD_ATTEMPTS:
                raise
            log.warning("recording function call %s failed; trying again", invocation_id)
            time.sleep(0.2 * attempt)


def signed_request(
    function: Function, invocation: FunctionInvocation
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


def _call_endpoint(
    function: Function, invocation: FunctionInvocation, endpoint_deadline: float
) -> tuple[Outcome, int | None]:
    url, body, headers = signed_request(function, invocation)
    remaining = endpoint_deadline - time.time()
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
        return Outcome.failure(
            "function_timeout", "The function did not answer within 5 seconds."
        ), None
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


def _publish(invocation_id: str, outcome: Outcome) -> None:
    if current_app.config["QUEUE_MODE"] != "rq":
        return
    key = RESULT_KEY + invocation_id
    try:
        pipe = queue.redis_connection().pipeline()
        pipe.rpush(key, json.dumps({"result": outcome.result, "error": outcome.error}))
        pipe.expire(key, 60)
        pipe.execute()
    except RedisError:
        pass  # the waiter falls back to the database row
