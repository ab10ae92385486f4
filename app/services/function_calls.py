"""Function calls: the AI asks for a function mid-call, the service calls the tenant's endpoint
and hands the JSON answer back to the voice runtime, always within the function's budget
(its timeoutMs, 5 s by default) plus 0.5 s. A function test (function_tests) calls the
endpoint the same way.

The web process checks the request and runs it as a job on the functions queue, waiting for
the job's return value (RQ's result); a worker sends the signed request (the endpoint gets
the budget, at most 1 s of it to connect), records the outcome and returns it, and the web
process dispatches function.called's deliveries once the answer is sent. Nothing is
written before the endpoint answers. Each invocation is recorded exactly once, by whichever
side gets there first (the worker with the answer, or the web process when its wait is over:
the primary key settles it), and is never retried once sent. A tenant's live calls take at
most its share of the function workers at once (FUNCTION_TENANT_SHARE): one beyond it is
answered function_busy at once, so a tenant's slow endpoints never hold up another's calls.
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

from app import metrics, queue, signing
from app.db import transaction
from app.errors import Conflict, NotFound
from app.models import AgentVersion, Call, Function, FunctionInvocation, Tenant
from app.models.agents import definitions_of
from app.outbound import client
from app.outbound.errors import OutboundError, OutboundTimeout
from app.services import events, snapshots
from app.services.deliveries import dispatch as delivery_dispatch
from app.services.functions import DEFAULT_TIMEOUT_MS, argument_errors
from app.util import new_id, utcnow

log = logging.getLogger(__name__)

# The budget is the function's timeoutMs, counted from the request that asked for the call.
ANSWER_MARGIN_S = 0.5  # the caller always has its answer by the end of the budget plus this
WAIT_MARGIN_S = 0.25  # the waiter stops this long after the budget, leaving time to answer
CONNECT_TIMEOUT_S = 1.0  # at most this much of the budget goes to connecting
SEND_MARGIN_S = 0.1  # too little time left to be worth sending
# A job starting later than this checks that its waiter still waits: it must stay below the
# shortest wait, MIN_TIMEOUT_MS plus WAIT_MARGIN_S.
LATE_AFTER_S = 0.5
BODY_METHODS = ("POST", "PUT", "PATCH")
ACTIVE_STATUSES = ("ringing", "answered")
# The jobs, by name: the jobs module imports this one.
INVOKE_JOB = "app.jobs.invoke_function"


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
    started: float  # Unix time of the request that asked for the call
    timeout_ms: int = DEFAULT_TIMEOUT_MS  # the function's budget then
    # The endpoint and method of the function's definition in the call's version of its
    # agent (None: the function's own, as a test has them).
    endpoint: str | None = None
    method: str | None = None

    @property
    def endpoint_deadline(self) -> float:
        """When the endpoint's budget ends: the request is cut off then, connecting included."""
        return self.started + self.timeout_ms / 1000

    @property
    def wait_deadline(self) -> float:
        """When the waiting request stops waiting for the job and answers without it."""
        return self.endpoint_deadline + WAIT_MARGIN_S


def timed_out(timeout_ms: int) -> Outcome:
    return Outcome.failure(
        "function_timeout", f"The function did not answer within {timeout_ms / 1000:g} s."
    )


def invoke(*, call_id: str, function_name: str, parameters: dict[str, Any]) -> Outcome:
    """Run one function call for the runtime; the outcome is ready within the function's
    budget plus ANSWER_MARGIN_S."""
    started = time.time()
    found = _find(call_id, function_name)
    if found is None:
        raise NotFound(f"Call {call_id} not found.")
    tenant_id, status, definition = found
    if status not in ACTIVE_STATUSES:
        raise Conflict(
            f"Call {call_id} is {status}; functions run only during a call.",
            code="call_not_active",
        )
    definition = definition or {}
    invocation = Invocation(
        id=new_id("fcall"),
        tenant_id=tenant_id,
        call_id=call_id,
        function_id=definition.get("id"),
        function_name=function_name,
        parameters=parameters,
        started=started,
        timeout_ms=definition.get("timeout_ms") or DEFAULT_TIMEOUT_MS,
        endpoint=definition.get("endpoint"),
        method=definition.get("method"),
    )
    outcome = refusal(definition.get("parameters"), function_name, parameters)
    if outcome is not None:
        record(invocation, outcome, http_status=None)
    else:
        outcome = _run_and_wait(invocation)
    metrics.FUNCTION_CALLS.labels(outcome.error["code"] if outcome.error else "ok").inc()
    metrics.FUNCTION_LATENCY.observe(time.time() - started)
    return outcome


def _find(call_id: str, function_name: str) -> tuple[str, str, dict[str, Any] | None] | None:
    """The call's tenant id and status, and the definition of the function of that name in
    the version of its agent the call was answered with (a version's function entry: id,
    endpoint, method, parameters, timeout_ms; None when the version has no such function);
    None when there is no such call. One read: the call with its version's row.

    A call from before versions uses its agent's live function of that name.
    """
    found = (
        Call.select(Call.tenant, Call.status, Call.agent, AgentVersion.function_digests)
        .join(
            AgentVersion,
            pw.JOIN.LEFT_OUTER,
            on=(AgentVersion.agent == Call.agent) & (AgentVersion.version == Call.agent_version),
        )
        .where(Call.id == call_id)
        .tuples()
        .first()
    )
    if found is None:
        return None
    tenant_id, status, agent_id, digests = found
    if digests is None:
        live = Function.get_or_none(
            (Function.agent == agent_id)
            & (Function.name == function_name)
            & Function.deleted_at.is_null()
        )
        return tenant_id, status, None if live is None else snapshots.function_entry(live)
    functions = definitions_of(agent_id, digests)
    entry = next((entry for entry in functions if entry["name"] == function_name), None)
    return tenant_id, status, entry


def refusal(declared: Any, name: str, parameters: dict[str, Any]) -> Outcome | None:
    """Why the tenant's endpoint must not be called, if it must not (declared: the function's
    parameters schema, None when the agent has no such function)."""
    if declared is None:
        return Outcome.failure("unknown_function", f"The agent has no function named {name}.")
    problems = argument_errors(declared, parameters)
    if problems:
        listed = "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in problems.items())
        return Outcome.failure("invalid_parameters", f"Invalid parameters: {listed}")
    return None


def record(
    invocation: Invocation,
    outcome: Outcome,
    *,
    http_status: int | None,
    dispatch: bool = True,
) -> bool:
    """Store the invocation with its outcome and emit function.called, unless it is stored
    already (the other side got there first): False then. dispatch: as emit's."""
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
    with transaction():
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
            dispatch=dispatch,
        )
    return True


def tenant_places(workers: str) -> int:
    """How many of one tenant's function calls may run at once on a pool of workers (workers:
    the setting of its size, FUNCTION_TEST_WORKERS for tests): its share, at least one."""
    config = current_app.config
    return max(1, int(config[workers] * config["FUNCTION_TENANT_SHARE"]))


def take_place(group: str, invocation: Invocation, *, workers: str, what: str) -> Outcome | None:
    """Take one of the tenant's places in group (its share of the pool of workers) until the
    invocation's answer is due at the latest; function_busy, naming what, when all are held."""
    places = tenant_places(workers)
    held_for = invocation.wait_deadline - time.time() + ANSWER_MARGIN_S
    if queue.take_place(group, invocation.id, places=places, seconds=held_for):
        return None
    return Outcome.failure(
        "function_busy",
        f"Too many of this account's {what} are running at once (at most {places}); the "
        "function was not called.",
    )


def _run_and_wait(invocation: Invocation) -> Outcome:
    """Run the job and wait for its outcome (function_timeout once the wait is over), while
    the tenant has a place among the function workers; function_busy at once when it has
    none."""
    group = f"functions:{invocation.tenant_id}"
    busy = take_place(group, invocation, workers="FUNCTION_WORKERS", what="function calls")
    if busy is not None:
        record(invocation, busy, http_status=None)
        return busy
    try:
        return _wait_for_job(invocation)
    finally:
        queue.give_back_place(group, invocation.id)
        # The job wrote function.called's deliveries without dispatching them, so as not to
        # hold up the answer: they are dispatched once it is sent.
        delivery_dispatch.dispatch_after_response(invocation.tenant_id)


def _wait_for_job(invocation: Invocation) -> Outcome:
    answer = queue.call(
        "functions",
        INVOKE_JOB,
        asdict(invocation),
        timeout=max(invocation.wait_deadline - time.time(), 0.01),
    )
    if answer is not None:
        return Outcome(**answer)
    timeout = timed_out(invocation.timeout_ms)
    if record(invocation, timeout, http_status=None):
        return timeout
    return Outcome.of(FunctionInvocation.get_by_id(invocation.id))  # the worker was first


def run(invocation: Invocation) -> Outcome:
    """The job: call the tenant's endpoint once, record the outcome and return it.

    If the waiter timed out meanwhile, its function_timeout was recorded first and this
    outcome is dropped, so the record always matches what the runtime was told.
    """
    # The waiter waits past the budget, so a job that starts within LATE_AFTER_S of the
    # request is surely awaited; only a later one looks for the function_timeout the waiter
    # records.
    if time.time() - invocation.started > LATE_AFTER_S:
        recorded = FunctionInvocation.get_or_none(FunctionInvocation.id == invocation.id)
        if recorded is not None:
            return Outcome.of(recorded)
    function = Function.get_or_none(Function.id == invocation.function_id)
    if function is None:
        invocation = replace(invocation, function_id=None)
    outcome, status = attempt(function, invocation)
    try:
        # The waiter has its answer once this commits: it dispatches the event's deliveries
        # once it has handed the answer on (_run_and_wait).
        record(invocation, outcome, http_status=status, dispatch=False)
    except Exception:  # the caller still gets its answer; the record is what is lost
        log.exception("could not record function call %s", invocation.id)
    return outcome


def attempt(function: Function | None, invocation: Invocation) -> tuple[Outcome, int | None]:
    """Call the endpoint once, unless the function is gone or its budget (nearly) spent; the
    outcome and the endpoint's HTTP status (None when it gave none)."""
    if function is None:
        return Outcome.failure("unknown_function", "The function was deleted."), None
    if invocation.endpoint_deadline - time.time() < SEND_MARGIN_S:
        return timed_out(invocation.timeout_ms), None
    try:
        return _call_endpoint(function, invocation)
    except Exception as exc:  # anything else that goes wrong is this call's failure
        log.exception("function call %s failed", invocation.id)
        message = f"The request to the endpoint failed ({type(exc).__name__})."
        return Outcome.failure("function_unreachable", message), None


def signed_request(
    function: Function, invocation: Invocation
) -> tuple[str, bytes | None, dict[str, str]]:
    """URL, body and headers of the request to the tenant's endpoint: the endpoint and
    method of the invocation's definition (its call's version), signed with the function's
    current secret.

    POST, PUT and PATCH send the JSON body and sign it; GET and DELETE send the values as
    query parameters (JSON-encoded when not strings) and sign the raw query string. While a
    rotated secret overlaps, X-Service-Signature-Previous is signed by the old one.
    """
    endpoint, method = _target(function, invocation)
    payload = {
        "callId": invocation.call_id,
        "functionName": invocation.function_name,
        "parameters": invocation.parameters,
    }
    headers = {"Content-Type": "application/json"}
    keys = signing.keys(function.signing_secret, function.previous_secret_in_use())
    if method in BODY_METHODS:
        body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        headers.update(signing.signature_headers(keys, body))
        return endpoint, body, headers
    values = {"callId": invocation.call_id, "functionName": invocation.function_name}
    for name, value in invocation.parameters.items():
        values[name] = value if isinstance(value, str) else json.dumps(value)
    query = urlencode(values)
    headers.update(signing.signature_headers(keys, query.encode()))
    separator = "&" if "?" in endpoint else "?"
    return f"{endpoint}{separator}{query}", None, headers


def _target(function: Function, invocation: Invocation) -> tuple[str, str]:
    """The endpoint and method to call: the invocation's, else the function's own."""
    return invocation.endpoint or function.endpoint, invocation.method or function.method


def _call_endpoint(function: Function, invocation: Invocation) -> tuple[Outcome, int | None]:
    url, body, headers = signed_request(function, invocation)
    method = _target(function, invocation)[1]
    remaining = invocation.endpoint_deadline - time.time()
    sender = client.sender(current_app.config["ALLOW_PRIVATE_URLS"])
    try:
        response = sender.send(
            method,
            url,
            body=body,
            headers=headers,
            timeout=(min(CONNECT_TIMEOUT_S, remaining), remaining),
        )
    except OutboundTimeout:
        return timed_out(invocation.timeout_ms), None
    except OutboundError as exc:
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
