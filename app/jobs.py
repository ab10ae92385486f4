"""RQ entry points: importable module-level functions that take ids."""

from app.db import connection
from app.services import deliveries


def deliver_webhook(delivery_id: str) -> None:
    """Make one attempt of a webhook delivery, if it is due and no other job holds it."""
    with connection():
        deliveries.attempt(delivery_id=delivery_id)
