"""RQ entry points: importable module-level functions that take ids or plain values.

worker.py runs them in processes that have the app's context; inline mode runs them in the
web process. Each opens its own database connection and returns it to the pool after.
"""

from collections.abc import Sequence
from typing import Any

from app.db import database
from app.services import campaign_permissions, campaigns, function_calls, function_tests
from app.services.calls import analysis as call_analysis
from app.services.calls import lifecycle as call_lifecycle
from app.services.deliveries import attempt as delivery_attempt
from app.services.deliveries import dispatch as delivery_dispatch
from app.services.deliveries import sweeper as delivery_sweeper


def deliver_webhook(
    delivery_id: str, job_id: str | None = None, then: Sequence[str] = ()
) -> str | None:
    """Attempt a webhook delivery if it is due and was dispatched to this job (job_id), then
    those of the same event to other webhooks (then); the first one's status after."""
    with database.connection_context():
        return delivery_attempt.deliver(delivery_id=delivery_id, job_id=job_id, then=then)


def dispatch_deliveries(tenant_id: str) -> int:
    """Dispatch the tenant's due deliveries (how many were sent to their queues)."""
    with database.connection_context():
        return delivery_dispatch.dispatch(tenant_id=tenant_id)


def invoke_function(invocation: dict[str, Any]) -> dict[str, Any]:
    """Call the tenant's endpoint once for a function call and record it; the outcome."""
    with database.connection_context():
        return function_calls.run(function_calls.Invocation(**invocation)).as_dict()


def run_function_test(invocation: dict[str, Any]) -> dict[str, Any]:
    """Call the tenant's endpoint once for a function test, recording nothing; the outcome
    and the endpoint's HTTP status."""
    with database.connection_context():
        return function_tests.run_test_job(function_calls.Invocation(**invocation))


def seek_call_permission(contact_id: str) -> str:
    """Ask Meta (and, when its campaign says so, the user) for a waiting campaign contact's
    call permission; what happened."""
    with database.connection_context():
        return campaign_permissions.seek_call_permission(contact_id=contact_id)


def sweep() -> int:
    """The periodic upkeep: dispatch every due delivery that no job holds (how many were
    dispatched), release the credit holds of calls that never ended, place the calls of
    the campaigns' due contacts, and ask again for the analyses whose jobs were lost.

    Deliveries first, so a failure of the others (it is raised) never keeps them waiting.
    """
    with database.connection_context():
        enqueued = delivery_sweeper.sweep()
        call_lifecycle.release_lapsed_holds()
        campaigns.place_due()
        call_analysis.requeue_stale()
        return enqueued


def analyze_call(
    call_id: str,
    attempt: int = 1,
    spent_idr: float = 0.0,
    plan_version: int | None = None,
    requested: str | None = None,
) -> str:
    """Analyse an ended call with Gemini for the request made at `requested`, or schedule it
    again (busy, retrying); what happened."""
    with database.connection_context():
        return call_analysis.run(
            call_id=call_id,
            attempt=attempt,
            spent_idr=spent_idr,
            plan_version=plan_version,
            requested=requested,
        )
