"""The wire format of a delivery: the event's JSON body and an attempt's signed headers."""

import json
from typing import Any

from app import signing
from app.models import Event
from app.util import isoformat


def event_payload(event: Event) -> dict[str, Any]:
    """The event as every delivery's body and the event log (GET /events) show it."""
    return {
        "id": event.id,
        "event": event.type,
        "timestamp": isoformat(event.created_at),
        "data": event.data,
    }


def event_body(event: Event) -> bytes:
    """The JSON body: the same bytes on every attempt."""
    return json.dumps(event_payload(event), separators=(",", ":"), ensure_ascii=False).encode()


def request_headers(
    *,
    secret: str,
    event_id: str,
    delivery_id: str,
    attempt: int,
    body: bytes,
    timestamp: int,
    previous_secret: str | None = None,
) -> dict[str, str]:
    """An attempt's headers. While a rotated secret overlaps (previous_secret), webhook-signature
    holds a signature by each secret, the new one's first, as Standard Webhooks allows, and
    X-Service-Signature-Previous the old one's; X-Service-Signature is the new one's."""
    keys = signing.keys(secret, previous_secret)
    return {
        "Content-Type": "application/json",
        **signing.signature_headers(keys, body),
        "X-Service-Event-Id": event_id,
        "X-Service-Delivery-Id": delivery_id,
        "X-Service-Attempt": str(attempt),
        **signing.standard_headers(keys, message_id=event_id, timestamp=timestamp, body=body),
    }
