"""The Webhooks pages in a real browser: create one, send a test event, retry its delivery,
replay missed events."""

import re
import socket
import time
from datetime import timedelta

import pytest
from playwright.sync_api import Locator, Page, expect

from app.db import database
from app.models import Webhook
from app.services import events
from app.services import webhooks as webhook_service
from app.util import utcnow
from tests.helpers import ACTOR
from tests.receiver import Answer, Receiver
from tests.system.browser.conftest import heading

# The server sends deliveries from its own background thread: the log is read again until
# the attempt shows.
LOG_WAIT_SECONDS = 5


class Switch:
    """What the receiver answers: every request gets the current status."""

    def __init__(self, status: int) -> None:
        self.status = status

    def __call__(self, request) -> Answer:
        return Answer(status=self.status, body=f"answered {self.status}".encode())


@pytest.fixture
def server_settings():
    """The webhook retry schedule at 100 times its length instead of the tests' 1/1000: no
    automatic retry comes between the failed attempt and the Retry button, so the attempt
    that succeeds is the one Retry sent."""
    return {"WEBHOOK_RETRY_SCALE": "100"}


@pytest.fixture
def switch():
    return Switch(500)


@pytest.fixture
def receiver(switch):
    with Receiver(switch) as receiver:
        yield receiver


def open_webhooks(page: Page, shot) -> None:
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Webhooks").click()
    expect(heading(page)).to_have_text("Webhooks")
    shot("webhooks")


def open_attempts(page: Page) -> None:
    """Open every delivery's disclosure of its attempts, as a person clicks each one."""
    closed = page.locator("details:not([open]) > summary")
    while closed.count():
        closed.first.click()


def reload_until(page: Page, shot, name: str, shown: Locator) -> None:
    """Reload the page (and open the attempts) until shown is on it; fails after
    LOG_WAIT_SECONDS."""
    deadline = time.monotonic() + LOG_WAIT_SECONDS
    while True:
        page.reload()
        open_attempts(page)
        shot(name)
        if shown.count() or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    expect(shown.first).to_be_visible()


def attempt_rows(page: Page, status_code: int) -> Locator:
    """The delivery log's attempts (the rows of each delivery's table of attempts) that got
    status_code."""
    return (
        page.get_by_role("table", name=re.compile(r"^Attempts of "))
        .get_by_role("row")
        .filter(has=page.get_by_role("cell", name=str(status_code), exact=True))
    )


def test_a_failed_test_delivery_succeeds_when_retried(
    page, shot, signed_in, receiver, switch, client, headers
):
    signed_in("owner")
    open_webhooks(page, shot)
    expect(page.get_by_text("No webhooks")).to_be_visible()
    page.get_by_role("link", name="Create webhook").click()
    expect(heading(page)).to_have_text("Create webhook")
    shot("create-webhook")
    page.get_by_label("URL").fill(f"{receiver.url}/hooks")
    page.get_by_label("call.ended").check()
    page.get_by_role("button", name="Create webhook").click()

    expect(heading(page)).to_have_text("Webhook")
    expect(page.get_by_role("status")).to_contain_text("Webhook created.")
    expect(page.get_by_label("call.ended")).to_be_checked()
    expect(page.get_by_label("call.started")).not_to_be_checked()
    expect(page.get_by_text("No deliveries yet.")).to_be_visible()
    shot("webhook-created")
    [webhook] = client.get("/api/v1/webhooks", headers=headers).json["webhooks"]
    assert (webhook["url"], webhook["events"]) == (f"{receiver.url}/hooks", ["call.ended"])

    page.get_by_role("button", name="Send test").click()
    expect(page.get_by_role("status")).to_contain_text("A webhook.test event is on its way")
    shot("test-sent")
    reload_until(page, shot, "test-failed", attempt_rows(page, 500))
    expect(attempt_rows(page, 500)).to_have_count(1)
    expect(attempt_rows(page, 500)).to_contain_text("The receiver answered 500.")
    expect(page.get_by_role("cell", name="pending", exact=True)).to_be_visible()
    [sent] = receiver.wait_for(1)
    assert sent.json()["event"] == "webhook.test"

    switch.status = 200
    page.get_by_role("button", name="Retry").click()
    expect(page.get_by_role("status")).to_contain_text("is being sent again")
    shot("retried")
    succeeded = page.get_by_role("cell", name="succeeded", exact=True)
    reload_until(page, shot, "retry-succeeded", succeeded)
    expect(attempt_rows(page, 500)).to_have_count(1)
    expect(attempt_rows(page, 200)).to_have_count(1)
    expect(page.get_by_role("button", name="Retry")).to_have_count(0)
    assert [request.headers["X-Service-Attempt"] for request in receiver.wait_for(2)] == ["1", "2"]
    log = client.get(f"/api/v1/webhooks/{webhook['id']}/deliveries", headers=headers).json
    assert [delivery["status"] for delivery in log["deliveries"]] == ["succeeded"]


def test_a_viewer_sees_the_delivery_log_without_its_change_buttons(
    page, shot, signed_in, tenant, receiver
):
    webhook = webhook_service.create_webhook(
        actor=ACTOR,
        tenant=tenant,
        url=f"{receiver.url}/hooks",
        events=["call.ended"],
        secret="s" * 32,
    )
    webhook_service.send_test(actor=ACTOR, tenant=tenant, webhook_id=webhook.id)  # answered 500
    signed_in("viewer")
    open_webhooks(page, shot)
    expect(page.get_by_role("link", name="Create webhook")).to_have_count(0)
    page.get_by_role("link", name=f"{receiver.url}/hooks").click()
    expect(heading(page)).to_have_text("Webhook")
    # The server's own sender may retry the pending delivery before the page is read.
    expect(page.get_by_text(re.compile(r"^\d+ attempts?: last answered 500$"))).to_be_visible()
    open_attempts(page)
    shot("webhook")
    expect(attempt_rows(page, 500).first).to_contain_text("The receiver answered 500.")
    expect(page.get_by_label("URL")).to_be_disabled()
    names = ("Retry", "Send test", "Disable", "Save", "Create webhook", "Delete webhook")
    for name in (*names, "Replay events"):
        expect(page.get_by_role("button", name=name)).to_have_count(0)
        expect(page.get_by_role("link", name=name)).to_have_count(0)
    expect(page.get_by_label("Since (UTC)")).to_have_count(0)


def test_replay_since_sends_the_missed_events_again(
    page, shot, signed_in, tenant, receiver, switch, client, headers
):
    """Events from before the webhook existed: the owner replays the last hours, and they
    arrive at the receiver with their own ids and show in the delivery log."""
    switch.status = 200
    now = utcnow().replace(second=0, microsecond=0)
    with database.atomic():
        missed = [
            events.emit(
                tenant_id=tenant.id,
                type="call.ended",
                data={"callId": f"call_{hours}"},
                occurred_at=now - timedelta(hours=hours),
            )
            for hours in (3, 2)
        ]
        events.emit(  # before the range
            tenant_id=tenant.id, type="call.ended", data={}, occurred_at=now - timedelta(hours=9)
        )
    webhook_service.create_webhook(
        actor=ACTOR,
        tenant=tenant,
        url=f"{receiver.url}/hooks",
        events=["call.ended"],
        secret="s" * 32,
    )
    signed_in("owner")
    open_webhooks(page, shot)
    page.get_by_role("link", name=f"{receiver.url}/hooks").click()
    expect(heading(page)).to_have_text("Webhook")
    expect(page.get_by_role("heading", name="Replay since…")).to_be_visible()
    expect(page.get_by_text("No deliveries yet.")).to_be_visible()
    shot("webhook")

    page.get_by_label("Since (UTC)").fill((now - timedelta(hours=4)).strftime("%Y-%m-%d %H:%M"))
    page.get_by_role("button", name="Replay events").click()
    expect(page.get_by_role("status")).to_contain_text("2 events queued for delivery.")
    shot("replayed")
    requests = receiver.wait_for(2)
    assert {r.headers["X-Service-Event-Id"] for r in requests} == {e.id for e in missed}
    reload_until(page, shot, "replay-delivered", attempt_rows(page, 200).nth(1))
    expect(attempt_rows(page, 200)).to_have_count(2)
    for event in missed:
        expect(page.get_by_text(event.id)).to_be_visible()
    detail = client.get(f"/api/v1/events/{missed[0].id}", headers=headers).json
    assert [delivery["status"] for delivery in detail["deliveries"]] == ["succeeded"]


def test_replay_since_with_until_before_since_says_so(page, shot, signed_in, tenant, receiver):
    webhook_service.create_webhook(
        actor=ACTOR,
        tenant=tenant,
        url=f"{receiver.url}/hooks",
        events=["call.ended"],
        secret="s" * 32,
    )
    signed_in("admin")
    open_webhooks(page, shot)
    page.get_by_role("link", name=f"{receiver.url}/hooks").click()
    shot("webhook")
    page.get_by_label("Since (UTC)").fill("2026-01-02 00:00")
    page.get_by_label("Until (UTC, optional)").fill("2026-01-01 00:00")
    page.get_by_role("button", name="Replay events").click()
    expect(page.get_by_text("Must be after since.")).to_be_visible()
    expect(page.get_by_label("Until (UTC, optional)")).to_have_attribute("aria-invalid", "true")
    shot("replay-refused")
    assert receiver.requests == []


def test_rotate_secret_shows_the_new_one_once_with_a_copy_button(
    page, shot, signed_in, tenant, receiver
):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    webhook = webhook_service.create_webhook(
        actor=ACTOR,
        tenant=tenant,
        url=f"{receiver.url}/hooks",
        events=["call.ended"],
        secret="s" * 32,
    )
    signed_in("admin")
    open_webhooks(page, shot)
    page.get_by_role("link", name=f"{receiver.url}/hooks").click()
    shot("webhook")
    page.get_by_role("link", name="Rotate secret").click()
    expect(heading(page)).to_have_text("Rotate the webhook's secret")
    expect(page.get_by_label("The old secret keeps signing for")).to_have_value("24")
    shot("rotate-secret")
    page.get_by_label("The old secret keeps signing for").select_option(label="1 hour")
    page.get_by_role("button", name="Rotate secret").click()
    expect(heading(page)).to_have_text("Webhook")
    expect(page.get_by_role("status")).to_contain_text("Secret rotated.")
    expect(page.get_by_role("status")).to_contain_text("The old secret signs every delivery")
    shot("secret-rotated")
    rotated = Webhook.get_by_id(webhook.id)
    new = page.get_by_label("New secret").input_value()
    assert new == rotated.secret and rotated.previous_secret_in_use() == "s" * 32
    page.get_by_role("button", name="Copy").click()
    expect(page.get_by_role("button", name="Copied")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == new


def test_long_attempts_stay_inside_the_log_and_the_summary_says_the_last_error(
    page, shot, signed_in, tenant
):
    long_body = ("x" * 60 + "/") * 40  # 2,440 characters, lines without a space
    chatty = Receiver(lambda request: Answer(status=502, body=long_body.encode()))
    with chatty:
        talking = webhook_service.create_webhook(
            actor=ACTOR,
            tenant=tenant,
            url=f"{chatty.url}/hooks",
            events=["call.ended"],
            secret="s" * 32,
        )
        webhook_service.send_test(actor=ACTOR, tenant=tenant, webhook_id=talking.id)
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            port = closed.getsockname()[1]
        silent = webhook_service.create_webhook(
            actor=ACTOR,
            tenant=tenant,
            url=f"http://127.0.0.1:{port}/hooks",
            events=["call.ended"],
            secret="s" * 32,
        )
        webhook_service.send_test(actor=ACTOR, tenant=tenant, webhook_id=silent.id)
        signed_in("viewer")

        page.goto(f"/dashboard/webhooks/{silent.id}")
        # The server's own sender may have tried again already: one attempt or more, all refused.
        summary = re.compile(r"^\d+ attempts?: last — The connection was refused\.$")
        expect(page.get_by_text(summary)).to_be_visible()
        open_attempts(page)
        expect(page.get_by_role("cell", name="The connection was refused.").first).to_be_visible()
        shot("refused")

        page.goto(f"/dashboard/webhooks/{talking.id}")
        expect(page.get_by_text(re.compile(r"^\d+ attempts?: last answered 502$"))).to_be_visible()
        open_attempts(page)
        shot("long-excerpt")
        log = page.locator(".scrolls").filter(has=page.locator("table.deliveries"))
        assert log.evaluate("e => e.scrollWidth <= e.clientWidth")
        row_box = page.locator("table.deliveries > tbody > tr").first.bounding_box()
        attempts = page.get_by_role("table", name=re.compile(r"^Attempts of ")).bounding_box()
        assert row_box and attempts
        assert attempts["x"] + attempts["width"] <= row_box["x"] + row_box["width"]
        whole = page.locator("details.whole").filter(has_text="Whole response excerpt").first
        expect(whole.locator("pre")).to_have_text(long_body[:2048])
