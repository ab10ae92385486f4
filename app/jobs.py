"""Job entry points: importable module-level functions that take ids or plain values."""

from typing import Any

from app.db import connection
from app.services import deliveries, function_calls


def deliver_webhook(delivery_id: str) -> None:
    """Attempt a webhook delivery if it is due and free, and other due ones in batches with it."""
    with connection():
        deliveries.deliver(delivery_id=delivery_id)


def invoke_function(invocation: dict[str, Any]) -> None:
    """Call the tenant's endpoint for one function invocation (once, before its deadline)."""
    with connection():
        function_calls.run(function_calls.Invocation(**invocation))
