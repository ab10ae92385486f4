"""Secret rotation without downtime: POST /webhooks/:id/rotate-secret and
POST /agents/:id/functions/:name/rotate-secret.

The new secret is shown once; the old one signs beside it until the overlap ends. A function's
requests (through its test endpoint, to a real endpoint on 127.0.0.1) carry both signatures
during the overlap and only the new one after; the clock moves through the stored expiry.
Webhook deliveries through a real worker.py are in tests/system/test_worker.py.
"""

import hashlib
import hmac
from datetime import datetime, timedelta

import pytest

from app.models import Function, Webhook
from app.services import keys as key_service
from app.services import secrets
from app.util import utcnow
from tests.helpers import ACTOR, assert_error
from tests.receiver import Receiver
from tests.runtime.test_function_calls import SECRET as FUNCTION_SECRET
from tests.runtime.test_function_calls import define, echo

WEBHOOKS = "/api/v1/webhooks"
SECRET = "a-very-secret-value-1234"
NEW_SECRET = "the-new-secret-value-5678"
# An overlap's end as answered is now plus the hours, within this much of the test's clock.
CLOCK_MARGIN = timedelta(seconds=30)


@pytest.fixture
def webhook_id(client, headers):
    body = {"url": "https://hooks.example.com/in", "events": ["call.ended"], "secret": SECRET}
    response = client.post(WEBHOOKS, json=body, headers=headers)
    assert response.status_code == 201
    return response.json["id"]


def rotate(client, headers, path, **body):
    return client.post(f"{path}/rotate-secret", json=body, headers=headers)


def close_to(text: str, expected: datetime) -> bool:
    """Whether the answer's timestamp is expected, give or take the test's own time."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00")).replace(tzinfo=None)
    return abs(moment - expected) <= CLOCK_MARGIN


def test_a_webhook_rotation_shows_the_new_secret_once_and_when_the_old_one_stops(
    client, headers, webhook_id
):
    response = rotate(client, headers, f"{WEBHOOKS}/{webhook_id}", secret=NEW_SECRET)
    assert response.status_code == 200, response.json
    assert response.headers["Cache-Control"] == "no-store"
    shown = response.json
    assert shown["id"] == webhook_id and shown["secret"] == NEW_SECRET
    assert shown["secretHint"] == NEW_SECRET[-4:]
    assert close_to(shown["previousSecretExpiresAt"], utcnow() + timedelta(hours=24))
    webhook = Webhook.get_by_id(webhook_id)
    assert (webhook.secret, webhook.previous_secret) == (NEW_SECRET, SECRET)
    # Never again: the webhook as read says when the overlap ends, not the secret.
    read = client.get(f"{WEBHOOKS}/{webhook_id}", headers=headers).json
    assert "secret" not in read and NEW_SECRET not in str(read) and SECRET not in str(read)
    assert read["previousSecretExpiresAt"] == shown["previousSecretExpiresAt"]


def test_a_rotation_without_a_secret_generates_one(client, headers, webhook_id):
    response = rotate(client, headers, f"{WEBHOOKS}/{webhook_id}")
    assert response.status_code == 200
    generated = response.json["secret"]
    assert len(generated) >= 40 and generated == Webhook.get_by_id(webhook_id).secret


def test_an_overlap_of_zero_ends_the_old_secret_at_once(client, headers, webhook_id):
    response = rotate(client, headers, f"{WEBHOOKS}/{webhook_id}", overlapHours=0)
    assert response.status_code == 200 and response.json["previousSecretExpiresAt"] is None
    assert Webhook.get_by_id(webhook_id).previous_secret_in_use() is None


def test_a_second_rotation_ends_the_first_ones_old_secret(client, headers, webhook_id):
    rotate(client, headers, f"{WEBHOOKS}/{webhook_id}", secret=NEW_SECRET, overlapHours=168)
    third = "a-third-secret-value-9012"
    response = rotate(client, headers, f"{WEBHOOKS}/{webhook_id}", secret=third, overlapHours=1)
    assert close_to(response.json["previousSecretExpiresAt"], utcnow() + timedelta(hours=1))
    webhook = Webhook.get_by_id(webhook_id)
    assert (webhook.secret, webhook.previous_secret_in_use()) == (third, NEW_SECRET)


def test_patching_the_secret_replaces_it_at_once(client, headers, webhook_id):
    rotate(client, headers, f"{WEBHOOKS}/{webhook_id}", secret=NEW_SECRET)
    third = "a-third-secret-value-9012"
    patched = client.patch(f"{WEBHOOKS}/{webhook_id}", json={"secret": third}, headers=headers)
    assert patched.status_code == 200 and patched.json["previousSecretExpiresAt"] is None
    assert Webhook.get_by_id(webhook_id).previous_secret_in_use() is None


@pytest.mark.parametrize(
    "body, field",
    [
        ({"secret": "short"}, "secret"),
        ({"secret": "s" * 257}, "secret"),
        ({"overlapHours": -1}, "overlapHours"),
        ({"overlapHours": secrets.MAX_OVERLAP_HOURS + 1}, "overlapHours"),
        ({"overlapHours": "24"}, "overlapHours"),
        ({"overlapHours": 1.5}, "overlapHours"),
        ({"secret": NEW_SECRET, "unknown": 1}, "unknown"),
    ],
)
def test_a_rotation_refuses_a_bad_body(client, headers, webhook_id, body, field):
    error = assert_error(
        rotate(client, headers, f"{WEBHOOKS}/{webhook_id}", **body), 422, "validation_error"
    )
    assert field in error["details"]
    assert Webhook.get_by_id(webhook_id).secret == SECRET


def test_the_current_secret_again_is_a_conflict(client, headers, webhook_id):
    response = rotate(client, headers, f"{WEBHOOKS}/{webhook_id}", secret=SECRET)
    assert assert_error(response, 409, "secret_unchanged")["message"].startswith(
        "The new secret is the current one"
    )
    webhook = Webhook.get_by_id(webhook_id)
    assert (webhook.secret, webhook.previous_secret) == (SECRET, None)


def test_another_tenants_webhook_or_function_is_not_found(
    client, other_headers, webhook_id, headers, agent_id
):
    assert_error(rotate(client, other_headers, f"{WEBHOOKS}/{webhook_id}"), 404, "not_found")
    define(client, headers, agent_id, "http://127.0.0.1:9/orders")
    path = f"/api/v1/agents/{agent_id}/functions/lookup_order"
    assert_error(rotate(client, other_headers, path), 404, "not_found")
    assert Webhook.get_by_id(webhook_id).secret == SECRET
    assert Function.get().signing_secret == FUNCTION_SECRET


def test_a_read_key_may_not_rotate(client, tenant, webhook_id):
    read_key = key_service.create_key(actor=ACTOR, tenant=tenant, name="reader", scope="read")[1]
    response = rotate(client, {"x-api-key": read_key}, f"{WEBHOOKS}/{webhook_id}")
    assert_error(response, 403, "insufficient_scope")


def signed_by(secret: str, payload: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()


def test_function_requests_carry_both_signatures_during_the_overlap_and_only_the_new_one_after(
    client, headers, agent_id
):
    with Receiver(echo) as endpoint:
        define(client, headers, agent_id, endpoint.url + "/orders")
        path = f"/api/v1/agents/{agent_id}/functions/lookup_order"
        response = rotate(client, headers, path, overlapHours=2)
        assert response.status_code == 200 and response.headers["Cache-Control"] == "no-store"
        new = response.json["signingSecret"]
        assert new.startswith("fsec_") and "previousSecretExpiresAt" in response.json
        listed = client.get(f"/api/v1/agents/{agent_id}/functions", headers=headers).json
        assert new not in str(listed)
        test = {"parameters": {"orderId": "A-17"}}
        assert client.post(f"{path}/test", json=test, headers=headers).json["ok"] is True
        # The overlap is over: the stored expiry is moved into the past.
        Function.update(previous_secret_expires_at=utcnow() - timedelta(seconds=1)).execute()
        assert client.post(f"{path}/test", json=test, headers=headers).json["ok"] is True
    during, after = endpoint.requests
    assert during.headers["X-Service-Signature"] == signed_by(new, during.body)
    assert during.headers["X-Service-Signature-Previous"] == signed_by(FUNCTION_SECRET, during.body)
    assert after.headers["X-Service-Signature"] == signed_by(new, after.body)
    assert "X-Service-Signature-Previous" not in after.headers


def test_a_get_functions_query_is_signed_by_both_secrets_during_the_overlap(
    client, headers, agent_id
):
    with Receiver(echo) as endpoint:
        define(client, headers, agent_id, endpoint.url + "/orders", method="GET")
        path = f"/api/v1/agents/{agent_id}/functions/lookup_order"
        new = rotate(client, headers, path, secret=NEW_SECRET).json["signingSecret"]
        test = {"parameters": {"orderId": "A-17"}}
        assert client.post(f"{path}/test", json=test, headers=headers).json["ok"] is True
    (request,) = endpoint.requests
    query = request.path.split("?", 1)[1].encode()
    assert request.headers["X-Service-Signature"] == signed_by(new, query)
    assert request.headers["X-Service-Signature-Previous"] == signed_by(FUNCTION_SECRET, query)


@pytest.mark.parametrize("route", ["function create", "function rotation", "webhook rotation"])
def test_every_answer_that_shows_a_secret_is_kept_by_no_cache_replayed_too(
    client, headers, agent_id, webhook_id, route
):
    """A new function's signingSecret and a rotation's new secret are shown once: the answer,
    and its replay for the same Idempotency-Key, carry Cache-Control: no-store."""
    functions = f"/api/v1/agents/{agent_id}/functions"
    path, body, secret = {
        "function create": (
            functions,
            {
                "name": "book",
                "description": "Book a slot.",
                "endpoint": "https://hooks.example.com/book",
                "parameters": {"type": "object", "properties": {}},
            },
            "signingSecret",
        ),
        "function rotation": (f"{functions}/lookup_order/rotate-secret", {}, "signingSecret"),
        "webhook rotation": (f"{WEBHOOKS}/{webhook_id}/rotate-secret", {}, "secret"),
    }[route]
    define(client, headers, agent_id, "https://hooks.example.com/orders")
    keyed = {**headers, "Idempotency-Key": f"once-{route}"}
    first = client.post(path, json=body, headers=keyed)
    assert first.status_code in (200, 201), first.json
    again = client.post(path, json=body, headers=keyed)
    assert again.headers["Idempotent-Replayed"] == "true"
    for answer in (first, again):
        assert answer.json[secret] == first.json[secret]
        assert answer.headers["Cache-Control"] == "no-store"
    listed = client.get(functions, headers=headers)
    assert "Cache-Control" not in listed.headers  # an answer without a secret is not marked
