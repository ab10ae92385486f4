"""Webhooks API: registration rules, the secret never returned, the delivery log, test, retry."""

import hashlib
import hmac
import socket
from datetime import timedelta

import pytest

from app import jobs, queue
from app.db import database
from app.models import Delivery, Webhook
from app.services import events
from app.util import utcnow
from tests.helpers import assert_error
from tests.receiver import Answer, Receiver

API = "/api/v1/webhooks"
SECRET = "a-very-secret-value-1234"


def body(url="https://hooks.example.com/in", events=("call.ended",), secret=SECRET, **extra):
    return {"url": url, "events": list(events), "secret": secret, **extra}


@pytest.fixture
def webhook(client, headers):
    response = client.post(API, json=body(), headers=headers)
    assert response.status_code == 201
    return response.json


@pytest.fixture
def private_urls_refused(app):
    app.config["ALLOW_PRIVATE_URLS"] = False


def emit(tenant, type="call.ended"):
    with database.atomic():
        return events.emit(tenant_id=tenant.id, type=type, data={"callId": "call_1"})


def test_create_returns_the_record_without_the_secret(client, headers):
    response = client.post(API, json=body(events=["call.ended", "credits.low"]), headers=headers)
    assert response.status_code == 201
    record = response.json
    assert list(record) == [
        "id",
        "url",
        "events",
        "isActive",
        "secretHint",
        "previousSecretExpiresAt",
        "disabledReason",
        "createdAt",
        "updatedAt",
    ]
    assert record["id"].startswith("wh_") and len(record["id"]) == 23
    assert record["url"] == "https://hooks.example.com/in"
    assert record["events"] == ["call.ended", "credits.low"]
    assert record["isActive"] is True and record["disabledReason"] is None
    assert record["secretHint"] == "1234"
    assert record["createdAt"].endswith("Z")
    assert SECRET not in response.get_data(as_text=True)


def test_secret_never_appears_in_any_response(client, headers, webhook, tenant):
    emit(tenant)
    paths = [API, f"{API}/{webhook['id']}", f"{API}/{webhook['id']}/deliveries"]
    for path in paths:
        response = client.get(path, headers=headers)
        assert response.status_code == 200
        assert SECRET not in response.get_data(as_text=True)
    patched = client.patch(
        f"{API}/{webhook['id']}", json={"events": ["call.started"]}, headers=headers
    )
    assert SECRET not in patched.get_data(as_text=True)


def test_list_wraps_webhooks(client, headers, webhook):
    response = client.get(API, headers=headers)
    assert response.status_code == 200
    assert response.json == {"webhooks": [webhook]}


@pytest.mark.parametrize(
    "payload, field",
    [
        (body(events=[]), "events"),
        (body(events=["call.exploded"]), "events"),
        (body(events=["call.ended", "call.ended"]), "events"),
        (body(events=["webhook.test"]), "events"),
        (body(secret="short"), "secret"),
        (body(secret="x" * 257), "secret"),
        (body(url="https://hooks.example.com/" + "a" * 2048), "url"),
        ({"events": ["call.ended"], "secret": SECRET}, "url"),
        ({"url": "https://hooks.example.com", "secret": SECRET}, "events"),
        ({"url": "https://hooks.example.com", "events": ["call.ended"]}, "secret"),
        (body(isActive=False), "isActive"),
        (body(colour="blue"), "colour"),
        (body(events="call.ended"), "events"),
    ],
)
def test_create_rejects_invalid_fields(client, headers, payload, field):
    error = assert_error(client.post(API, json=payload, headers=headers), 422, "validation_error")
    assert field in error["details"]


def test_create_unknown_event_names_the_allowed_ones(client, headers):
    response = client.post(API, json=body(events=["call.ended", "nope"]), headers=headers)
    error = assert_error(response, 422, "validation_error")
    assert error["details"] == {
        "events": {
            "1": [
                "Must be one of: call.started, call.answered, call.ended, call.transcript, "
                "credits.low, function.called, campaign.completed, call.analyzed."
            ]
        }
    }


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/in",
        "https://10.0.0.1/in",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/in",
        "https://[::ffff:127.0.0.1]/in",
        "https://[::ffff:a00:1]/in",
        "https://0.0.0.0/in",
        "http://hooks.example.com/in",
        "https://user:pass@hooks.example.com/in",
    ],
)
def test_create_refuses_private_and_unsafe_urls(client, headers, private_urls_refused, url):
    response = client.post(API, json=body(url=url), headers=headers)
    error = assert_error(response, 422, "validation_error")
    assert error["message"] == "Invalid value for url."
    assert list(error["details"]) == ["url"]
    assert Webhook.select().count() == 0


def test_create_answers_alike_for_a_host_resolving_internally_and_one_that_does_not(
    client, headers, private_urls_refused, monkeypatch
):
    """Registration does not map the internal DNS: a name resolving to a private address and
    a name that does not resolve get the same answer (the sender refuses both when it
    delivers, with the same reason), and the resolver is not even asked."""
    looked_up = []

    def getaddrinfo(host, port, *args, **kwargs):
        looked_up.append(host)
        if host != "intranet.example.com":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.168.0.10", port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    answers = []
    for host in ("intranet.example.com", "nowhere.example.com"):
        response = client.post(API, json=body(url=f"https://{host}/in"), headers=headers)
        answers.append((response.status_code, sorted(response.json)))
    assert answers[0] == answers[1] and answers[0][0] == 201
    assert looked_up == []
    # An address written out is refused at once: it tells nothing about the resolver.
    response = client.post(API, json=body(url="https://192.168.0.10/in"), headers=headers)
    assert_error(response, 422, "validation_error")


@pytest.mark.parametrize("allow_private", [True, False])
@pytest.mark.parametrize("url", ["https://a..b/h", "https://xn--/h", "https://xn--a.test/h"])
def test_create_refuses_a_host_that_is_no_host_name(app, client, headers, allow_private, url):
    app.config["ALLOW_PRIVATE_URLS"] = allow_private
    response = client.post(API, json=body(url=url), headers=headers)
    error = assert_error(response, 422, "validation_error")
    assert error["message"] == "Invalid value for url."
    assert list(error["details"]) == ["url"]
    assert "not a valid host name" in error["details"]["url"][0]
    assert Webhook.select().count() == 0


# A name resolving to loopback with the root's dot, a dotted address, percent-escapes: each
# host leads to 127.0.0.1 once the sender has normalised it.
LOOPBACK_SPELLINGS = [
    "localhost.",
    "127.0.0.1.",
    "%31%32%37.0.0.1",
    "127%2e0%2e0%2e1",
    "loc%61lhost",
]


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_create_and_patch_refuse_loopback_however_it_is_written(
    client, headers, webhook, private_urls_refused, host
):
    url = f"https://{host}/in"
    created = client.post(API, json=body(url=url), headers=headers)
    patched = client.patch(f"{API}/{webhook['id']}", json={"url": url}, headers=headers)
    for response in (created, patched):
        error = assert_error(response, 422, "validation_error")
        assert error["message"] == "Invalid value for url."
        assert "a private or reserved address" in error["details"]["url"][0]
    assert [hook.url for hook in Webhook.select()] == [webhook["url"]]


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_loopback_however_written_is_delivered_to_when_private_urls_are_allowed(
    app, client, headers, host
):
    with Receiver() as receiver:
        url = f"http://{host}:{receiver.port}"
        created = client.post(API, json=body(url=url + "/created"), headers=headers).json
        client.post(f"{API}/{created['id']}/test", headers=headers)
        receiver.wait_for(1)
        patched = client.patch(
            f"{API}/{created['id']}", json={"url": url + "/patched"}, headers=headers
        )
        assert patched.status_code == 200
        client.post(f"{API}/{created['id']}/test", headers=headers)
        requests = receiver.wait_for(2)
        assert queue.inline_worker(app).wait_idle(5)
    assert [request.path for request in requests] == ["/created", "/patched"]


@pytest.mark.parametrize("allow_private", [True, False])
def test_create_refuses_a_host_the_sender_cannot_send_to(app, client, headers, allow_private):
    app.config["ALLOW_PRIVATE_URLS"] = allow_private
    fullwidth = "\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54"  # localhost
    response = client.post(API, json=body(url=f"https://{fullwidth}/in"), headers=headers)
    error = assert_error(response, 422, "validation_error")
    assert "not a valid host name" in error["details"]["url"][0]
    assert Webhook.select().count() == 0


def test_create_with_private_urls_allowed_accepts_local_http(client, headers):
    response = client.post(API, json=body(url="http://127.0.0.1:8080/in"), headers=headers)
    assert response.status_code == 201


def test_get_unknown_webhook_is_404(client, headers):
    error = assert_error(client.get(f"{API}/wh_nope", headers=headers), 404, "not_found")
    assert "wh_nope" in error["message"]


def test_patch_changes_fields_and_keeps_the_rest(client, headers, webhook):
    response = client.patch(
        f"{API}/{webhook['id']}",
        json={"events": ["call.started"], "secret": "another-secret-5678"},
        headers=headers,
    )
    assert response.status_code == 200
    assert response.json["events"] == ["call.started"]
    assert response.json["secretHint"] == "5678"
    assert response.json["url"] == webhook["url"]
    assert Webhook.get_by_id(webhook["id"]).secret == "another-secret-5678"


def test_patch_validates_like_create(client, headers, webhook, private_urls_refused):
    for payload, field in [
        ({"url": "https://10.0.0.1/"}, "url"),
        ({"events": []}, "events"),
        ({"secret": "short"}, "secret"),
        ({"isActive": "yes"}, "isActive"),
        ({"id": "wh_x"}, "id"),
    ]:
        response = client.patch(f"{API}/{webhook['id']}", json=payload, headers=headers)
        assert field in assert_error(response, 422, "validation_error")["details"]


def test_patch_disable_then_enable_clears_the_reason(client, headers, webhook, tenant):
    Webhook.update(
        is_active=False, disabled_reason="The receiver answered 410 Gone.", failing_since=utcnow()
    ).execute()
    response = client.patch(f"{API}/{webhook['id']}", json={"isActive": True}, headers=headers)
    assert response.json["isActive"] is True and response.json["disabledReason"] is None
    assert Webhook.get_by_id(webhook["id"]).failing_since is None
    response = client.patch(f"{API}/{webhook['id']}", json={"isActive": False}, headers=headers)
    assert response.json["isActive"] is False


def test_disabling_fails_pending_deliveries(client, headers, tenant):
    # A receiver that always fails keeps the delivery pending for a retry.
    with Receiver(lambda request: Answer(500)) as receiver:
        created = client.post(API, json=body(url=receiver.url), headers=headers).json
        emit(tenant)
    assert Delivery.get().status == "pending"
    client.patch(f"{API}/{created['id']}", json={"isActive": False}, headers=headers)
    delivery = Delivery.get()
    assert delivery.status == "failed" and delivery.last_error == "The webhook was disabled."


def test_delete_returns_204_and_removes_it(client, headers, webhook):
    response = client.delete(f"{API}/{webhook['id']}", headers=headers)
    assert response.status_code == 204 and response.data == b""
    assert_error(client.get(f"{API}/{webhook['id']}", headers=headers), 404, "not_found")
    assert_error(client.delete(f"{API}/{webhook['id']}", headers=headers), 404, "not_found")


def test_deliveries_log_lists_every_attempt(app, client, headers, tenant):
    app.config["WEBHOOK_RETRY_SCALE"] = 0
    answers = iter([Answer(500, body=b"down for maintenance"), Answer(200, body=b"thanks")])
    with Receiver(lambda request: next(answers)) as receiver:
        created = client.post(API, json=body(url=receiver.url), headers=headers).json
        event = emit(tenant)
        jobs.sweep()
    response = client.get(f"{API}/{created['id']}/deliveries", headers=headers)
    assert response.status_code == 200
    [delivery] = response.json["deliveries"]
    assert response.json["pagination"] == {"total": 1, "limit": 50, "offset": 0, "hasMore": False}
    assert delivery["eventId"] == event.id and delivery["event"] == "call.ended"
    assert delivery["webhookId"] == created["id"] and delivery["id"].startswith("dlv_")
    assert (delivery["status"], delivery["attemptCount"]) == ("succeeded", 2)
    assert delivery["lastStatusCode"] == 200 and delivery["lastError"] is None
    assert delivery["completedAt"].endswith("Z") and delivery["nextAttemptAt"] is None
    first, second = delivery["attempts"]
    assert list(first) == [
        "number",
        "attemptedAt",
        "statusCode",
        "durationMs",
        "error",
        "responseExcerpt",
    ]
    assert (first["number"], first["statusCode"], first["responseExcerpt"]) == (
        1,
        500,
        "down for maintenance",
    )
    assert first["error"] == "The receiver answered 500." and first["durationMs"] >= 0
    assert (second["number"], second["statusCode"], second["error"]) == (2, 200, None)


def test_deliveries_log_paginates_newest_first(client, headers, tenant):
    with Receiver() as receiver:
        created = client.post(API, json=body(url=receiver.url), headers=headers).json
        ids = [emit(tenant).id for _ in range(5)]
    path = f"{API}/{created['id']}/deliveries"
    page = client.get(path + "?limit=2&offset=1", headers=headers).json
    assert [d["eventId"] for d in page["deliveries"]] == ids[::-1][1:3]
    assert page["pagination"] == {"total": 5, "limit": 2, "offset": 1, "hasMore": True}
    last = client.get(path + "?limit=2&offset=4", headers=headers).json
    assert last["pagination"]["hasMore"] is False and len(last["deliveries"]) == 1
    failed = client.get(path + "?status=failed", headers=headers).json
    assert failed["deliveries"] == [] and failed["pagination"]["total"] == 0


@pytest.mark.parametrize(
    "query, field",
    [("limit=0", "limit"), ("limit=101", "limit"), ("offset=-1", "offset"), ("status=x", "status"),
     ("limit=abc", "limit")],
)  # fmt: skip
def test_deliveries_log_rejects_bad_parameters(client, headers, webhook, query, field):
    response = client.get(f"{API}/{webhook['id']}/deliveries?{query}", headers=headers)
    assert field in assert_error(response, 422, "validation_error")["details"]


def test_test_event_goes_to_that_webhook_only_and_is_signed(app, client, headers, tenant):
    with Receiver() as receiver:
        created = client.post(API, json=body(url=receiver.url + "/one"), headers=headers).json
        client.post(API, json=body(url=receiver.url + "/two"), headers=headers)
        response = client.post(f"{API}/{created['id']}/test", headers=headers)
        assert response.status_code == 202
        assert response.json["event"] == "webhook.test"
        assert response.json["status"] == "pending"
        [request] = receiver.wait_for(1)
        assert queue.inline_worker(app).wait_idle(5)
    assert request.path == "/one"
    payload = request.json()
    assert payload["event"] == "webhook.test" and payload["data"]["webhookId"] == created["id"]
    expected = hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Service-Signature"] == "sha256=" + expected
    assert request.headers["X-Service-Delivery-Id"] == response.json["id"]
    log = client.get(f"{API}/{created['id']}/deliveries", headers=headers).json
    assert log["deliveries"][0]["status"] == "succeeded"


def test_test_event_answers_before_a_slow_receiver(app, client, headers):
    with Receiver(lambda request: Answer(delay=1.0)) as receiver:
        created = client.post(API, json=body(url=receiver.url), headers=headers).json
        started = utcnow()
        response = client.post(f"{API}/{created['id']}/test", headers=headers)
        assert response.status_code == 202
        assert utcnow() - started < timedelta(seconds=0.8)
        receiver.wait_for(1)
        assert queue.inline_worker(app).wait_idle(5)


def test_test_event_on_a_disabled_webhook_is_409(client, headers, webhook):
    client.patch(f"{API}/{webhook['id']}", json={"isActive": False}, headers=headers)
    response = client.post(f"{API}/{webhook['id']}/test", headers=headers)
    assert "enable" in assert_error(response, 409, "conflict")["message"]


def test_retry_sends_a_failed_delivery_again_with_the_same_event_id(app, client, headers, tenant):
    answers = iter([Answer(500), Answer(200)])
    with Receiver(lambda request: next(answers)) as receiver:
        created = client.post(API, json=body(url=receiver.url), headers=headers).json
        emit(tenant)
        Delivery.update(status="failed", next_attempt_at=None).execute()
        delivery = Delivery.get()
        response = client.post(f"{API}/deliveries/{delivery.id}/retry", headers=headers)
        assert response.status_code == 202
        assert response.json["id"] == delivery.id and response.json["status"] == "pending"
        first, second = receiver.wait_for(2)
        assert queue.inline_worker(app).wait_idle(5)
    assert first.headers["X-Service-Event-Id"] == second.headers["X-Service-Event-Id"]
    assert second.headers["X-Service-Attempt"] == "2"
    log = client.get(f"{API}/{created['id']}/deliveries", headers=headers).json
    assert log["deliveries"][0]["status"] == "succeeded"


def test_retry_of_unknown_delivery_is_404(client, headers):
    assert_error(client.post(f"{API}/deliveries/dlv_nope/retry", headers=headers), 404, "not_found")


def test_retry_on_a_disabled_webhook_is_409(client, headers, tenant):
    with Receiver(lambda request: Answer(410)) as receiver:
        client.post(API, json=body(url=receiver.url), headers=headers)
        emit(tenant)
    response = client.post(f"{API}/deliveries/{Delivery.get().id}/retry", headers=headers)
    assert_error(response, 409, "conflict")


def test_webhooks_need_an_api_key(client):
    assert_error(client.get(API), 401, "unauthorized")
    assert_error(client.post(API, json=body()), 401, "unauthorized")
