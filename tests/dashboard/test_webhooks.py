"""Dashboard webhooks: create, edit, disable, send test, the delivery log, retry, delete."""

import logging
import re
from datetime import timedelta

import pytest

from app import queue
from app.db import database
from app.models import AuditEntry, Delivery, Webhook
from app.services import events
from app.services import webhooks as webhook_service
from app.services.events import EVENT_TYPES
from app.util import utcnow
from tests.dashboard.audit import changes
from tests.dashboard.conftest import csrf_token, sign_in
from tests.receiver import Answer, Receiver

WEBHOOKS = "/dashboard/webhooks"
SECRET = "a-very-secret-value-1234"
FORM = {
    "url": "https://hooks.example.com/in",
    "events": ["call.ended", "credits.low", ""],  # the group's hidden empty value last
    "secret": SECRET,
}


def text(response) -> str:
    return response.get_data(as_text=True)


def api_webhook(client, headers, webhook_id):
    return client.get(f"/api/v1/webhooks/{webhook_id}", headers=headers)


def create_api_webhook(client, headers, url="https://hooks.example.com/in", **fields):
    body = {"url": url, "events": ["call.ended"], "secret": SECRET, **fields}
    response = client.post("/api/v1/webhooks", json=body, headers=headers)
    assert response.status_code == 201, response.json
    return response.json["id"]


def emit(tenant, type="call.ended"):
    with database.atomic():
        return events.emit(tenant_id=tenant.id, type=type, data={"callId": "call_1"})


@pytest.fixture
def webhook_id(signed_in, headers):
    return create_api_webhook(signed_in, headers)


@pytest.fixture
def no_automatic_retry(app):
    """Keep the next scheduled attempt hours away, so each attempt is one the test made."""
    app.config["WEBHOOK_RETRY_SCALE"] = 1000


def settled(app):
    assert queue.inline_worker(app).wait_idle(5)


def test_webhooks_page_lists_url_events_state_and_secret_hint(signed_in, headers, webhook_id):
    Webhook.update(is_active=False, disabled_reason="The receiver answered 410 Gone.").execute()
    page = signed_in.get(WEBHOOKS)
    assert page.status_code == 200
    body = text(page)
    assert "<h1>Webhooks</h1>" in body
    assert f'href="/dashboard/webhooks/{webhook_id}">https://hooks.example.com/in</a>' in body
    assert "call.ended" in body and "The receiver answered 410 Gone." in body
    assert "…1234" in body and SECRET not in body
    assert 'href="/dashboard/webhooks/new">Create webhook</a>' in body
    headers = ("URL", "Events", "Health", "Failed attempts in a row", "Last success (UTC)")
    for header in (*headers, "Secret ends in"):
        assert f'<th scope="col">{header}</th>' in body
    assert "Disabled</span>: The receiver answered 410 Gone." in body


def test_create_form_offers_every_event_and_a_generated_secret(signed_in):
    page = signed_in.get(f"{WEBHOOKS}/new")
    assert page.status_code == 200
    body = text(page)
    assert "<h1>Create webhook</h1>" in body
    for event in EVENT_TYPES:
        assert f'value="{event}"' in body and f">{event}</label>" in body
    secret = re.search(r'name="secret" value="([^"]+)"', body).group(1)
    assert 16 <= len(secret) <= 256
    assert secret != re.search(
        r'name="secret" value="([^"]+)"', text(signed_in.get(f"{WEBHOOKS}/new"))
    ).group(1)
    assert "16 to 256 characters" in body


def test_create_webhook_shows_it_in_the_api_and_its_secret_once(signed_in, post, headers, caplog):
    caplog.set_level(logging.DEBUG)
    response = post(f"{WEBHOOKS}/new", FORM)
    assert response.status_code == 201
    [listed] = signed_in.get("/api/v1/webhooks", headers=headers).json["webhooks"]
    assert listed["url"] == "https://hooks.example.com/in"
    assert listed["events"] == ["call.ended", "credits.low"]
    assert listed["isActive"] is True and listed["secretHint"] == "1234"
    assert Webhook.get().secret == SECRET
    body = text(response)
    assert f'readonly value="{SECRET}"' in body and "shown only this once" in body
    assert f'action="/dashboard/webhooks/{listed["id"]}"' in body
    assert SECRET not in text(signed_in.get(f"{WEBHOOKS}/{listed['id']}"))
    assert all(SECRET not in str(record.__dict__) for record in caplog.records)
    assert changes() == [("webhook.created", listed["id"], {})]
    assert SECRET not in str(list(AuditEntry.select().dicts()))


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("events", [""], "Subscribe to at least one event."),
        ("events", ["call.ended", "call.ending"], "Choose one of call.started"),
        ("secret", "short", "Use 16 to 256 characters."),
        ("secret", "s" * 257, "Use 16 to 256 characters."),
        ("url", "", "Use 1 to 2048 characters."),
        ("url", "ftp://hooks.example.com/in", "https"),
        ("url", "https://user:pw@hooks.example.com/in", "user name or password"),
        ("url", "https://a..b/h", "not a valid host name"),
    ],
)
def test_create_webhook_with_a_bad_field_shows_its_message(signed_in, post, field, value, message):
    response = post(f"{WEBHOOKS}/new", {**FORM, field: value})
    assert response.status_code == 422
    body = text(response)
    assert message in body and f'id="{field}-error"' in body
    assert Webhook.select().count() == 0
    if field != "secret":
        assert f'value="{SECRET}"' in body  # the input is kept


def test_create_webhook_refuses_a_private_url_unless_allowed(app, signed_in, post):
    app.config["ALLOW_PRIVATE_URLS"] = False
    for url in ("http://127.0.0.1:9/in", "https://10.0.0.1/in", "https://169.254.169.254/"):
        response = post(f"{WEBHOOKS}/new", {**FORM, "url": url})
        assert response.status_code == 422, url
        assert 'id="url-error"' in text(response)
    assert Webhook.select().count() == 0
    app.config["ALLOW_PRIVATE_URLS"] = True
    assert post(f"{WEBHOOKS}/new", {**FORM, "url": "http://127.0.0.1:9/in"}).status_code == 201


def test_webhook_page_shows_its_form_and_actions(signed_in, webhook_id):
    page = signed_in.get(f"{WEBHOOKS}/{webhook_id}")
    assert page.status_code == 200
    body = text(page)
    assert "<h1>Webhook</h1>" in body and "https://hooks.example.com/in" in body
    assert 'name="url" value="https://hooks.example.com/in"' in body
    assert 'value="call.ended" checked' in body and 'value="credits.low">' in body
    assert 'name="isActive" value="true" checked' in body
    for button in ("Save</button>", "Send test</button>", "Disable</button>", "Delete webhook"):
        assert button in body
    assert "No deliveries yet." in body


def test_saving_the_form_changes_url_and_events(signed_in, post, headers, webhook_id):
    form = {
        "url": "https://hooks.example.com/v2",
        "events": ["call.started", "call.ended", ""],
        "isActive": ["true", "false"],
    }
    response = post(f"{WEBHOOKS}/{webhook_id}", form)
    assert response.status_code == 302
    assert response.headers["Location"] == f"{WEBHOOKS}/{webhook_id}"
    webhook = api_webhook(signed_in, headers, webhook_id).json
    assert webhook["url"] == "https://hooks.example.com/v2"
    assert webhook["events"] == ["call.started", "call.ended"]
    assert webhook["isActive"] is True and webhook["secretHint"] == "1234"
    assert changes() == [("webhook.updated", webhook_id, {"fields": ["events", "url"]})]
    assert "Webhook saved." in text(signed_in.get(f"{WEBHOOKS}/{webhook_id}"))


def test_a_field_left_out_keeps_its_value(signed_in, post, headers, webhook_id):
    post(f"{WEBHOOKS}/{webhook_id}", {"events": ["credits.low", ""]})
    webhook = api_webhook(signed_in, headers, webhook_id).json
    assert webhook["events"] == ["credits.low"]
    assert webhook["url"] == "https://hooks.example.com/in" and webhook["isActive"] is True


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("events", [""], "Subscribe to at least one event."),
        ("url", "https://user:pw@hooks.example.com/in", "user name or password"),
        ("isActive", "maybe", "Choose yes or no."),
    ],
)
def test_saving_a_bad_field_shows_its_message_and_changes_nothing(
    signed_in, post, headers, webhook_id, field, value, message
):
    before = api_webhook(signed_in, headers, webhook_id).json
    response = post(
        f"{WEBHOOKS}/{webhook_id}", {"url": "https://hooks.example.com/v2", field: value}
    )
    assert response.status_code == 422
    assert message in text(response) and f'id="{field}-error"' in text(response)
    assert api_webhook(signed_in, headers, webhook_id).json == before


def test_disable_then_tick_active_to_enable_again(signed_in, post, headers, webhook_id):
    response = post(f"{WEBHOOKS}/{webhook_id}/disable")
    assert response.status_code == 302
    assert api_webhook(signed_in, headers, webhook_id).json["isActive"] is False
    page = text(signed_in.get(f"{WEBHOOKS}/{webhook_id}"))
    assert "Webhook disabled" in page and "Disable</button>" not in page
    assert "Send test</button>" in page and '<button type="submit" disabled>Send test' in page
    post(f"{WEBHOOKS}/{webhook_id}", {"isActive": ["true", "false"]})
    assert api_webhook(signed_in, headers, webhook_id).json["isActive"] is True
    assert changes() == [
        ("webhook.updated", webhook_id, {"fields": ["isActive"]}),
        ("webhook.updated", webhook_id, {"fields": ["isActive"]}),
    ]


def test_send_test_arrives_and_shows_in_the_log(app, signed_in, post, headers):
    with Receiver() as receiver:
        webhook_id = create_api_webhook(signed_in, headers, url=receiver.url + "/hook")
        response = post(f"{WEBHOOKS}/{webhook_id}/test")
        assert response.status_code == 302
        [request] = receiver.wait_for(1)
        settled(app)
    assert request.path == "/hook" and request.json()["event"] == "webhook.test"
    page = text(signed_in.get(f"{WEBHOOKS}/{webhook_id}"))
    assert "A webhook.test event is on its way" in page
    assert request.headers["X-Service-Delivery-Id"] in page
    assert ">succeeded</td>" in page and "<td>200</td>" in page
    delivery_id = request.headers["X-Service-Delivery-Id"]
    assert changes() == [("webhook.test_sent", webhook_id, {"deliveryId": delivery_id})]
    log = signed_in.get(f"/api/v1/webhooks/{webhook_id}/deliveries", headers=headers).json
    assert log["deliveries"][0]["status"] == "succeeded"


def test_send_test_on_a_disabled_webhook_says_why(signed_in, post, headers, webhook_id):
    signed_in.patch(f"/api/v1/webhooks/{webhook_id}", json={"isActive": False}, headers=headers)
    response = post(f"{WEBHOOKS}/{webhook_id}/test")
    assert response.status_code == 409
    assert "enable it before sending a test event" in text(response)
    assert Delivery.select().count() == 0


def test_a_failed_attempt_is_in_the_log_and_retry_makes_another(
    app, signed_in, post, headers, no_automatic_retry
):
    answers = iter([Answer(500, body=b"down for maintenance"), Answer(200, body=b"thanks")])
    with Receiver(lambda request: next(answers)) as receiver:
        webhook_id = create_api_webhook(signed_in, headers, url=receiver.url)
        post(f"{WEBHOOKS}/{webhook_id}/test")
        receiver.wait_for(1)
        settled(app)
        delivery = Delivery.get()
        page = text(signed_in.get(f"{WEBHOOKS}/{webhook_id}"))
        row = page[page.index(f'<tr id="{delivery.id}">') :]
        assert ">pending</td>" in row and "<td>1</td>" in row
        assert "<td>500</td>" in row and "The receiver answered 500." in row
        assert "down for maintenance" in row and " ms</td>" in row
        assert delivery.next_attempt_at.strftime("%Y-%m-%d %H:%M") in row
        assert f'action="/dashboard/webhooks/deliveries/{delivery.id}/retry"' in row
        response = post(f"{WEBHOOKS}/deliveries/{delivery.id}/retry")
        assert response.status_code == 302
        assert response.headers["Location"] == f"{WEBHOOKS}/{webhook_id}"
        first, second = receiver.wait_for(2)
        settled(app)
    assert second.headers["X-Service-Attempt"] == "2"
    assert first.headers["X-Service-Event-Id"] == second.headers["X-Service-Event-Id"]
    page = text(signed_in.get(f"{WEBHOOKS}/{webhook_id}"))
    assert f"Delivery {delivery.id} is being sent again" in page
    row = page[page.index(f'<tr id="{delivery.id}">') :]
    assert ">succeeded</td>" in row and "<td>2</td>" in row and "thanks" in row
    assert f"/deliveries/{delivery.id}/retry" not in row  # settled: nothing to retry
    assert [change[:2] for change in changes()] == [
        ("webhook.test_sent", webhook_id),
        ("delivery.retried", delivery.id),
    ]
    [logged] = signed_in.get(f"/api/v1/webhooks/{webhook_id}/deliveries", headers=headers).json[
        "deliveries"
    ]
    assert [attempt["statusCode"] for attempt in logged["attempts"]] == [500, 200]


def test_retry_on_a_disabled_webhook_says_why(signed_in, post, headers, tenant):
    with Receiver(lambda request: Answer(410)) as receiver:
        webhook_id = create_api_webhook(signed_in, headers, url=receiver.url)
        emit(tenant)
    delivery = Delivery.get()
    page = text(signed_in.get(f"{WEBHOOKS}/{webhook_id}"))
    assert "disabled" in page and "Retry</button>" not in page
    response = post(f"{WEBHOOKS}/deliveries/{delivery.id}/retry")
    assert response.status_code == 409
    assert "enable it before retrying" in text(response)


def emitted_at(tenant, when, type="call.ended"):
    with database.atomic():
        return events.emit(
            tenant_id=tenant.id, type=type, data={"callId": "call_1"}, occurred_at=when
        )


def minutes(moment) -> str:
    """A time as the form's UTC text inputs take it."""
    return moment.strftime("%Y-%m-%d %H:%M")


def test_the_replay_form_offers_since_a_day_ago(signed_in, webhook_id):
    page = text(signed_in.get(f"{WEBHOOKS}/{webhook_id}"))
    assert '<h2 id="replay">Replay since…</h2>' in page
    # Text in UTC, not a date picker that shows the browser's own format beside "(UTC)".
    assert 'type="text" id="replay-since" name="since"' in page
    assert 'placeholder="YYYY-MM-DD HH:MM"' in page
    assert f'value="{minutes(utcnow() - timedelta(days=1))[:13]}' in page  # the hour
    assert '<label for="replay-until">Until (UTC, optional)</label>' in page
    assert ">Replay events</button>" in page


def test_replay_queues_the_range_and_says_how_many(app, signed_in, post, headers, tenant):
    now = utcnow().replace(second=0, microsecond=0)
    emitted_at(tenant, now - timedelta(hours=5))
    missed = [emitted_at(tenant, now - timedelta(hours=hours)) for hours in (3, 2)]
    emitted_at(tenant, now - timedelta(hours=2), type="credits.low")  # not subscribed
    with Receiver() as receiver:
        webhook_id = create_api_webhook(signed_in, headers, url=receiver.url)
        since, until = minutes(now - timedelta(hours=4)), minutes(now - timedelta(hours=1))
        response = post(f"{WEBHOOKS}/{webhook_id}/replay", {"since": since, "until": until})
        assert response.status_code == 302
        assert response.headers["Location"] == f"{WEBHOOKS}/{webhook_id}"
        requests = receiver.wait_for(2)
        settled(app)
    assert {r.headers["X-Service-Event-Id"] for r in requests} == {e.id for e in missed}
    page = text(signed_in.get(f"{WEBHOOKS}/{webhook_id}"))
    assert "2 events queued for delivery." in page
    assert all(event.id in page for event in missed)  # in the delivery log
    assert changes() == [
        (
            "webhook.replayed",
            webhook_id,
            {
                "since": since.replace(" ", "T") + ":00.000Z",
                "until": until.replace(" ", "T") + ":00.000Z",
                "events": None,
                "replayed": 2,
            },
        )
    ]


def test_replay_without_until_runs_until_now(signed_in, post, headers, tenant):
    event = emitted_at(tenant, utcnow() - timedelta(minutes=30))
    webhook_id = create_api_webhook(signed_in, headers, url="http://127.0.0.1:9/in")
    since = minutes(utcnow() - timedelta(hours=1))
    response = post(f"{WEBHOOKS}/{webhook_id}/replay", {"since": since, "until": ""})
    assert response.status_code == 302
    assert "1 event queued for delivery." in text(signed_in.get(response.headers["Location"]))
    assert [delivery.event_id for delivery in Delivery.select()] == [event.id]
    [(action, _, details)] = changes()
    assert action == "webhook.replayed" and details["until"] > details["since"]  # now


@pytest.mark.parametrize(
    "form, field, message",
    [
        ({"since": ""}, "since", "Fill this in."),
        ({"since": "yesterday"}, "since", "Enter a time as YYYY-MM-DD HH:MM, in UTC."),
        ({"since": "2026-01-02T00:00", "until": "2026-01-01T00:00"}, "until", "after since"),
    ],
)
def test_replay_with_a_bad_time_shows_its_message(
    signed_in, post, webhook_id, form, field, message
):
    response = post(f"{WEBHOOKS}/{webhook_id}/replay", form)
    assert response.status_code == 422
    page = text(response)
    errors = page[page.index(f'id="replay-{field}-error"') :]
    assert message in errors[: errors.index("</ul>")]
    assert Delivery.select().count() == 0 and changes() == []


def test_replay_of_too_many_events_says_so(signed_in, post, tenant, headers, monkeypatch):
    monkeypatch.setattr(webhook_service, "REPLAY_LIMIT", 2)
    for _ in range(3):
        emitted_at(tenant, utcnow() - timedelta(minutes=30))
    webhook_id = create_api_webhook(signed_in, headers)
    since = minutes(utcnow() - timedelta(hours=1))
    response = post(f"{WEBHOOKS}/{webhook_id}/replay", {"since": since})
    assert response.status_code == 422
    assert "more than 2 events to replay" in text(response)
    assert Delivery.select().count() == 0 and changes() == []


def test_replay_on_a_disabled_webhook_says_why(signed_in, post, headers, webhook_id):
    signed_in.patch(f"/api/v1/webhooks/{webhook_id}", json={"isActive": False}, headers=headers)
    page = text(signed_in.get(f"{WEBHOOKS}/{webhook_id}"))
    assert '<button type="submit" disabled>Replay events</button>' in page
    since = minutes(utcnow() - timedelta(hours=1))
    response = post(f"{WEBHOOKS}/{webhook_id}/replay", {"since": since})
    assert response.status_code == 409
    assert "enable it (PATCH isActive true) before replaying" in text(response)
    assert changes() == []


def test_the_delivery_log_pages_newest_first_and_filters_by_status(signed_in, headers, tenant):
    with Receiver() as receiver:
        webhook_id = create_api_webhook(signed_in, headers, url=receiver.url)
        ids = [emit(tenant).id for _ in range(23)]
    newest_first = [
        d.id for d in Delivery.select().order_by(Delivery.created_at.desc(), Delivery.id.desc())
    ]
    path = f"{WEBHOOKS}/{webhook_id}"
    first = text(signed_in.get(path))
    assert "Deliveries 1–20 of 23, newest first." in first
    shown = re.findall(r'<tr id="(dlv_[a-z0-9]+)">', first)
    assert shown == newest_first[:20]
    assert f'href="{path}?offset=20&amp;limit=20#deliveries">Older</a>' in first
    assert ">Newer</a>" not in first
    second = text(signed_in.get(f"{path}?offset=20&limit=20"))
    assert re.findall(r'<tr id="(dlv_[a-z0-9]+)">', second) == newest_first[20:]
    assert f'href="{path}?offset=0&amp;limit=20#deliveries">Newer</a>' in second
    assert ">Older</a>" not in second
    assert ids[0] in second  # the oldest event comes last
    small = text(signed_in.get(f"{path}?limit=5&offset=5&status=succeeded"))
    assert re.findall(r'<tr id="(dlv_[a-z0-9]+)">', small) == newest_first[5:10]
    assert "offset=10&amp;limit=5&amp;status=succeeded" in small
    failed = text(signed_in.get(f"{path}?status=failed"))
    assert "No deliveries failed yet." in failed
    assert "<option selected>failed</option>" in failed


@pytest.mark.parametrize("query", ["limit=0", "limit=101", "offset=-1", "status=x", "limit=abc"])
def test_bad_delivery_log_parameters_are_422(signed_in, webhook_id, query):
    response = signed_in.get(f"{WEBHOOKS}/{webhook_id}?{query}")
    assert response.status_code == 422
    assert "Invalid delivery log parameters" in text(response)
    assert query.split("=")[0] in text(response)


def test_delete_asks_for_confirmation_then_deletes(signed_in, post, headers, webhook_id):
    page = text(signed_in.get(f"{WEBHOOKS}/{webhook_id}"))
    assert f'href="{WEBHOOKS}/{webhook_id}/delete">Delete webhook</a>' in page
    confirm = signed_in.get(f"{WEBHOOKS}/{webhook_id}/delete")
    assert confirm.status_code == 200
    assert "<h1>Delete webhook</h1>" in text(confirm)
    assert ">Delete webhook</button>" in text(confirm)
    assert api_webhook(signed_in, headers, webhook_id).status_code == 200
    response = post(f"{WEBHOOKS}/{webhook_id}/delete")
    assert response.status_code == 302 and response.headers["Location"] == WEBHOOKS
    assert api_webhook(signed_in, headers, webhook_id).status_code == 404
    assert "Webhook deleted." in text(signed_in.get(WEBHOOKS))
    assert changes() == [("webhook.deleted", webhook_id, {})]


def test_a_viewer_sees_webhooks_without_buttons_and_cannot_change_them(
    client, viewer, headers, tenant
):
    sign_in(client, viewer.email)
    with Receiver(lambda request: Answer(500)) as receiver:
        webhook_id = create_api_webhook(client, headers, url=receiver.url)
        emit(tenant)
    delivery = Delivery.get()
    assert "Create webhook" not in text(client.get(WEBHOOKS))
    page = client.get(f"{WEBHOOKS}/{webhook_id}")
    assert page.status_code == 200
    body = text(page).split("</header>", 1)[1]
    assert "The receiver answered 500." in body
    for button in ("Save", "Send test", "Disable", "Retry", "Delete", "Replay"):
        assert button not in body, button
    assert '<button type="submit" class="secondary">Filter</button>' in body  # reading only
    assert client.get(f"{WEBHOOKS}/new").status_code == 403
    assert client.get(f"{WEBHOOKS}/{webhook_id}/delete").status_code == 403
    token = csrf_token(client.get("/dashboard/"))
    for path, data in [
        (f"{WEBHOOKS}/new", FORM),
        (f"{WEBHOOKS}/{webhook_id}", {"url": "https://hooks.example.com/mine"}),
        (f"{WEBHOOKS}/{webhook_id}/disable", {}),
        (f"{WEBHOOKS}/{webhook_id}/test", {}),
        (f"{WEBHOOKS}/deliveries/{delivery.id}/retry", {}),
        (f"{WEBHOOKS}/{webhook_id}/replay", {"since": "2000-01-01T00:00"}),
        (f"{WEBHOOKS}/{webhook_id}/delete", {}),
    ]:
        assert client.post(path, data={**data, "csrf_token": token}).status_code == 403, path
    webhook = api_webhook(client, headers, webhook_id).json
    assert webhook["url"] == receiver.url and webhook["isActive"] is True
    assert Delivery.select().count() == 1 and Delivery.get().attempts == 1


def test_another_tenants_webhook_and_delivery_are_404_everywhere(
    signed_in, post, other_tenant, other_headers
):
    with Receiver(lambda request: Answer(500)) as receiver:
        theirs = create_api_webhook(signed_in, other_headers, url=receiver.url)
        emit(other_tenant)
    delivery = Delivery.get()
    base = f"{WEBHOOKS}/{theirs}"
    for path in (base, f"{base}/delete"):
        response = signed_in.get(path)
        assert response.status_code == 404 and response.content_type.startswith("text/html")
    for path, data in [
        (base, {"url": "https://hooks.example.com/mine"}),
        (f"{base}/disable", {}),
        (f"{base}/test", {}),
        (f"{WEBHOOKS}/deliveries/{delivery.id}/retry", {}),
        (f"{base}/replay", {"since": "2000-01-01T00:00"}),
        (f"{base}/delete", {}),
    ]:
        assert post(path, data).status_code == 404, path
    webhook = api_webhook(signed_in, other_headers, theirs).json
    assert webhook["url"] == receiver.url and webhook["isActive"] is True
    assert Delivery.select().count() == 1 and Delivery.get().attempts == 1
    assert receiver.url not in text(signed_in.get(WEBHOOKS))


@pytest.mark.parametrize(
    "path", ["/new", "/{webhook}", "/{webhook}/disable", "/{webhook}/test",
             "/deliveries/{delivery}/retry", "/{webhook}/replay", "/{webhook}/delete"],
)  # fmt: skip
def test_a_post_without_its_csrf_token_is_refused(signed_in, headers, tenant, path):
    with Receiver(lambda request: Answer(500)) as receiver:
        webhook_id = create_api_webhook(signed_in, headers, url=receiver.url)
        emit(tenant)
    delivery = Delivery.get()
    response = signed_in.post(
        WEBHOOKS + path.format(webhook=webhook_id, delivery=delivery.id),
        data={**FORM, "isActive": "false", "since": "2000-01-01T00:00"},
    )
    assert response.status_code == 400
    assert "This form has expired" in text(response)
    assert Webhook.select().count() == 1 and Webhook.get().is_active
    assert Delivery.select().count() == 1 and Delivery.get().attempts == 1


JUNK = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "%00",
    "' OR 1=1 --",
    "<script>alert(1)</script>",
    "9" * 400,
    "null",
    "[]",
    "x" * 70_000,
    "https://" + "a" * 3000 + ".test/",
    "http://[::1",
    "https://exa mple.test/",
    "\u202e\ufeff",
    "\r\n",
]


@pytest.mark.parametrize("value", JUNK)
def test_junk_in_any_field_is_never_a_500(signed_in, post, webhook_id, value):
    for field in ("url", "events", "secret", "isActive", "unknown"):
        for path in (f"{WEBHOOKS}/new", f"{WEBHOOKS}/{webhook_id}"):
            response = post(path, {**FORM, field: value})
            assert response.status_code in (201, 302, 422), (path, field, response.status_code)
    for field in ("since", "until", "unknown"):
        response = post(
            f"{WEBHOOKS}/{webhook_id}/replay", {"since": "2000-01-01T00:00", field: value}
        )
        assert response.status_code in (302, 409, 422), (field, response.status_code)
    for query in ("limit", "offset", "status"):
        response = signed_in.get(f"{WEBHOOKS}/{webhook_id}", query_string={query: value})
        assert response.status_code in (200, 404, 422), (query, response.status_code)
    for path in (f"{WEBHOOKS}/{value}", f"{WEBHOOKS}/deliveries/{value}/retry"):
        if value.strip("\r\n /"):
            response = signed_in.get(path) if "retry" not in path else post(path)
            assert response.status_code < 500, path


def test_rotate_secret_asks_for_confirmation_and_the_overlap(signed_in, webhook_id):
    page = signed_in.get(f"{WEBHOOKS}/{webhook_id}/rotate-secret")
    assert page.status_code == 200
    body = text(page)
    assert "Rotate the webhook&#39;s secret" in body and "Rotate secret</button>" in body
    assert '<option value="24" selected>24 hours</option>' in body
    assert Webhook.get_by_id(webhook_id).secret == SECRET


def test_rotate_secret_shows_the_new_one_once_and_records_it(signed_in, post, webhook_id):
    token_from = f"{WEBHOOKS}/{webhook_id}/rotate-secret"
    form = {"overlapHours": "72"}
    response = post(f"{WEBHOOKS}/{webhook_id}/rotate-secret", form, token_from=token_from)
    assert response.status_code == 200 and response.headers["Cache-Control"] == "no-store"
    webhook = Webhook.get_by_id(webhook_id)
    assert webhook.secret != SECRET and webhook.previous_secret_in_use() == SECRET
    body = text(response)
    assert f'readonly value="{webhook.secret}"' in body and 'data-copy="new-secret"' in body
    expires = webhook.overlap_ends_at
    assert f"until {expires:%Y-%m-%d %H:%M:%S} UTC" in body
    assert abs(expires - (utcnow() + timedelta(hours=72))) < timedelta(minutes=1)
    assert webhook.secret not in text(signed_in.get(f"{WEBHOOKS}/{webhook_id}"))
    [(action, target, details)] = changes()[-1:]
    assert (action, target, details["overlapHours"]) == ("webhook.secret_rotated", webhook_id, 72)
    assert webhook.secret not in str(list(AuditEntry.select().dicts()))


def test_a_reloaded_rotation_does_not_rotate_again(signed_in, webhook_id):
    path = f"{WEBHOOKS}/{webhook_id}/rotate-secret"
    form = {
        "overlapHours": "24",
        "form_id": "one-form",
        "csrf_token": csrf_token(signed_in.get(path)),
    }
    assert signed_in.post(path, data=form).status_code == 200
    rotated = Webhook.get_by_id(webhook_id).secret
    again = signed_in.post(path, data=form)
    assert again.status_code == 302 and Webhook.get_by_id(webhook_id).secret == rotated


def test_a_viewer_cannot_rotate_a_secret(client, viewer, headers, webhook_id):
    sign_in(client, viewer.email)
    assert client.get(f"{WEBHOOKS}/{webhook_id}/rotate-secret").status_code == 403
    assert "Rotate secret" not in text(client.get(f"{WEBHOOKS}/{webhook_id}"))
