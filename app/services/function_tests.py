"""Function tests: a function called as a live call would call it, with callId call_test.

A test (POST /api/v1/agents/:id/functions/:name/test) is the same request, signed the same
way, from the same sender with the same budget, and nothing is recorded. Its job runs on a
queue of its own, function_tests, served by a pool of its own (worker.py), so tests never take
a worker that a live call is waiting for; a tenant's tests take at most its share of that pool
(FUNCTION_TENANT_SHARE), and one beyond it is function_busy at once.
"""

import time
from dataclasses import asdict, dataclass
from typing import Any

from app import queue
from app.models import Function, Tenant
from app.services import agents as agent_service
from app.services.function_calls import (
    Invocation,
    Outcome,
    attempt,
    refusal,
    take_place,
    timed_out,
)
from app.services.functions import get_function
from app.util import new_id

TEST_CALL_ID = "call_test"  # the callId a function test sends
TEST_JOB = "app.jobs.run_function_test"


def run_test_job(invocation: Invocation) -> dict[str, Any]:
    """The test's job: call the tenant's endpoint once, exactly as function_calls.run() does,
    and record nothing; the outcome with the endpoint's HTTP status (statusCode, None without
    one)."""
    function = Function.get_or_none(Function.id == invocation.function_id)
    outcome, status = attempt(function, invocation)
    return {**outcome.as_dict(), "statusCode": status}


@dataclass(frozen=True)
class FunctionTestReport:
    """What a function test found: the outcome, the endpoint's HTTP status (None when it gave
    none), and how long it took from the request to the answer against the budget."""

    outcome: Outcome
    status_code: int | None
    duration_ms: int
    budget_ms: int

    @property
    def ok(self) -> bool:
        return self.outcome.error is None

    @property
    def result(self) -> dict[str, Any] | None:
        return self.outcome.result

    @property
    def error(self) -> dict[str, str] | None:
        return self.outcome.error


def run_test(
    *, tenant: Tenant, agent_id: str, name: str, parameters: dict[str, Any]
) -> FunctionTestReport:
    """Call one of the tenant's functions as a live call would, with callId call_test: the
    parameters checked first, then the signed request within the function's budget, through
    a job as a live call's; nothing recorded, no event. The report is ready within the budget
    plus ANSWER_MARGIN_S."""
    started = time.time()
    agent = agent_service.get_agent(tenant=tenant, agent_id=agent_id)
    function = get_function(agent=agent, name=name)
    invocation = Invocation(
        id=new_id("ftest"),
        tenant_id=tenant.id,
        call_id=TEST_CALL_ID,
        function_id=function.id,
        function_name=function.name,
        parameters=parameters,
        started=started,
        timeout_ms=function.timeout_ms,
    )
    outcome, status = refusal(function.parameters, function.name, parameters), None
    if outcome is None:
        outcome, status = _run_test_and_wait(invocation)
    return FunctionTestReport(
        outcome=outcome,
        status_code=status,
        duration_ms=int((time.time() - started) * 1000),
        budget_ms=function.timeout_ms,
    )


def _run_test_and_wait(invocation: Invocation) -> tuple[Outcome, int | None]:
    """The test's job's outcome and HTTP status, as function_calls' wait for a live call: while the
    tenant has a place among the test workers, else function_busy at once."""
    group = f"function_tests:{invocation.tenant_id}"
    busy = take_place(group, invocation, workers="FUNCTION_TEST_WORKERS", what="function tests")
    if busy is not None:
        return busy, None
    try:
        answer = queue.call(
            "function_tests",
            TEST_JOB,
            asdict(invocation),
            timeout=max(invocation.wait_deadline - time.time(), 0.01),
        )
    finally:
        queue.give_back_place(group, invocation.id)
    if answer is None:
        return timed_out(invocation.timeout_ms), None
    status = answer.pop("statusCode")
    return Outcome(**answer), status
