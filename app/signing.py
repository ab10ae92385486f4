"""Every signature the service makes: webhook deliveries and function calls, by one set of keys.

A record signs with its current secret; while a rotated secret overlaps, the one it replaced
signs beside it (keys), so a receiver still on the old secret keeps verifying. SPEC.md's
X-Service-Signature is signed by the current secret on every request; Standard Webhooks'
webhook-signature (deliveries only) lists a signature by each key.
"""

import base64
import hashlib
import hmac


def keys(secret: str, previous: str | None) -> list[str]:
    """The secrets that sign a request: the current one first, then the previous one while a
    rotation's overlap lasts (previous, None once it ended)."""
    return [secret, *([previous] if previous else [])]


def sign(secret: str, payload: bytes) -> str:
    """X-Service-Signature of webhooks and function calls: sha256=<hex HMAC-SHA256 of payload>."""
    return "sha256=" + hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()


def signature_headers(secrets: list[str], payload: bytes) -> dict[str, str]:
    """X-Service-Signature by the first (current) secret, and while a rotated one overlaps
    (a second secret), X-Service-Signature-Previous by it: a receiver still on the old secret
    checks that one. The first header keeps SPEC.md's one-signature form for every receiver."""
    current, *previous = secrets
    headers = {"X-Service-Signature": sign(current, payload)}
    if previous:
        headers["X-Service-Signature-Previous"] = sign(previous[0], payload)
    return headers


def sign_standard(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """Standard Webhooks' webhook-signature: v1,<base64 HMAC of "{id}.{timestamp}.{body}">."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def standard_headers(
    secrets: list[str], *, message_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """Standard Webhooks' headers: webhook-id, webhook-timestamp, and webhook-signature with
    a signature by each secret, the current one's first, as the standard allows."""
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(
            sign_standard(secret, message_id, timestamp, body) for secret in secrets
        ),
    }
