"""RQ entry points: importable module-level functions that take ids."""


def deliver_webhook(delivery_id: str) -> None:
    """Make one delivery attempt of a webhook (the delivery itself arrives with webhooks)."""
