"""What the dashboard tells, in a real browser: a failing webhook's health and its delivery
log, every form problem at once, a user enabled again, the low-balance threshold, a call's
number, the caller search, a secret's Copy button, the Overview's height, and audit details
without None. (Every page a browser test visits is checked for UTC, the icon and
accessibility by shot().)"""

import pytest
from playwright.sync_api import expect

from app.db import database
from app.models import Tenant, User
from app.services import audit
from app.services import users as user_service
from app.services import webhooks as webhook_service
from tests.call_flow import whole_call
from tests.dashboard.conftest import PASSWORD
from tests.helpers import ACTOR
from tests.receiver import Answer, Receiver
from tests.system.browser.conftest import heading, menu, row


@pytest.fixture
def server_settings():
    """Automatic retries hours away: the attempts are the ones the test makes."""
    return {"WEBHOOK_RETRY_SCALE": "100"}


def test_a_failing_webhook_shows_failing_since_not_active(app, page, shot, signed_in, tenant):
    # The test's own attempts run here, not in the server: their retries hours away as well,
    # or a slow machine sees a third attempt before the page is read.
    app.config["WEBHOOK_RETRY_SCALE"] = 100
    with Receiver(lambda request: Answer(status=500)) as receiver:
        webhook = webhook_service.create_webhook(
            actor=ACTOR,
            tenant=tenant,
            url=f"{receiver.url}/hooks",
            events=["call.ended"],
            secret="s" * 32,
        )
        for _ in range(2):
            webhook_service.send_test(actor=ACTOR, tenant=tenant, webhook_id=webhook.id)
        receiver.wait_for(2)
    signed_in("viewer")
    expect(page.get_by_text(f"{receiver.url}/hooks")).to_be_visible()  # the Overview's list
    expect(page.get_by_text("2 failed attempts in a row, last success never")).to_be_visible()
    menu(page).get_by_role("link", name="Webhooks").click()
    listed = row(page, "2")
    expect(listed).to_contain_text("Failing since")
    expect(listed).to_contain_text("never")
    expect(page.get_by_text("Healthy")).to_have_count(0)
    shot("webhooks")
    page.get_by_role("link", name=f"{receiver.url}/hooks").click()
    expect(heading(page)).to_have_text("Webhook")
    expect(page.get_by_text("Failing since")).to_be_visible()
    # One row per delivery; the attempts behind a disclosure, closed.
    deliveries = page.locator("table.deliveries > tbody > tr")
    expect(deliveries).to_have_count(2)
    expect(page.get_by_role("table", name="Attempts of " + "dlv", exact=False)).to_have_count(0)
    shot("webhook")
    deliveries.first.get_by_text("1 attempt: last answered 500").click()
    attempts = page.get_by_role("table", name="Attempts of", exact=False)
    expect(attempts).to_have_count(1)
    expect(attempts).to_contain_text("The receiver answered 500.")
    shot("attempts-open")


def test_a_function_form_shows_every_problem_at_once(page, shot, signed_in, agent_id):
    signed_in("owner")
    page.goto(f"/dashboard/agents/{agent_id}/functions")
    shot("agent-functions")
    form = page.locator("form", has=page.get_by_role("button", name="Add function"))
    form.get_by_label("Name").fill("1st")
    form.get_by_label("Endpoint URL").fill("ftp://example.com/slots")
    form.get_by_label("Parameters (JSON)").fill('{"type": "object",')
    form.get_by_role("button", name="Add function").click()
    for message in (
        "Letters, digits and _, not starting with a digit.",
        "Use 1 to 1024 characters.",
        "The URL must start with http:// or https://.",
        "Not valid JSON (line 1, column 19).",
    ):
        expect(page.get_by_text(message)).to_be_visible()
    expect(page.get_by_text("Missing data for required field.")).to_have_count(0)
    shot("every-problem")


def test_an_owner_enables_a_disabled_user(page, shot, signed_in, tenant):
    ana = user_service.create_user(
        actor=ACTOR, tenant=tenant, email="ana@acme.test", password=PASSWORD, role="admin"
    )
    user_service.disable(actor=ACTOR, user=ana)
    signed_in("owner")
    menu(page).get_by_role("link", name="Team").click()
    expect(row(page, "ana@acme.test")).to_contain_text("Disabled")
    shot("team")
    page.get_by_role("button", name="Enable ana@acme.test").click()
    expect(page.get_by_role("status")).to_contain_text("ana@acme.test can sign in again")
    expect(row(page, "ana@acme.test")).to_contain_text("Active")
    shot("enabled")
    assert User.get_by_id(ana.id).disabled_at is None


def test_an_owner_sets_the_low_balance_threshold(page, shot, signed_in, tenant):
    signed_in("owner")
    menu(page).get_by_role("link", name="Settings").click()
    expect(heading(page)).to_have_text("Settings")
    field = page.get_by_label("Low-balance threshold (minutes)")
    expect(field).to_have_value("10")
    shot("settings")
    field.fill("30")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("falls below 30 minutes")
    shot("saved")
    assert Tenant.get_by_id(tenant.id).low_balance_threshold == 30
    menu(page).get_by_role("link", name="Credits").click()
    expect(page.get_by_text("30 min")).to_be_visible()
    shot("credits")


def test_a_calls_page_names_its_number_and_calls_are_found_by_caller(
    page, shot, signed_in, client, runtime_headers, did
):
    call_id = whole_call(client, runtime_headers, did)
    signed_in("viewer")
    menu(page).get_by_role("link", name="Calls").click()
    shot("calls")
    page.get_by_label("Caller number").fill("+62812*")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_role("link", name="Details", exact=False)).to_have_count(1)
    shot("calls-by-caller")
    page.get_by_label("Caller number").fill("+62813*")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_text("No calls match these filters.")).to_be_visible()
    shot("no-calls")
    page.goto(f"/dashboard/calls/{call_id}")
    expect(page.get_by_text(f"{did} (Main)")).to_be_visible()
    shot("call")


def test_a_new_functions_secret_has_a_copy_button(page, shot, signed_in, agent_id):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    signed_in("owner")
    page.goto(f"/dashboard/agents/{agent_id}/functions")
    shot("agent-functions")
    form = page.locator("form", has=page.get_by_role("button", name="Add function"))
    form.get_by_label("Name").fill("lookup")
    form.get_by_label("Description").fill("Looks it up.")
    form.get_by_label("Endpoint URL").fill("http://127.0.0.1:9/lookup")
    form.get_by_role("button", name="Add function").click()
    secret = page.get_by_label("Signing secret").input_value()
    assert secret.startswith("fsec_")
    page.get_by_role("button", name="Copy").click()
    expect(page.get_by_role("button", name="Copied")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == secret
    shot("function-added")


def test_the_overview_ends_where_its_content_ends(page, shot, signed_in):
    """The chart's table for screen readers is hidden without stretching the page."""
    signed_in("owner")
    # How far the page scrolls past its content (a page shorter than the window scrolls not).
    blank = page.evaluate(
        """() => document.documentElement.scrollHeight - Math.max(innerHeight,
                 document.querySelector("main").getBoundingClientRect().bottom + scrollY)"""
    )
    assert blank < 50, f"{blank} px of blank space below the Overview"
    expect(page.get_by_role("table", name="Calls and billed minutes per day")).to_have_count(1)


def test_audit_details_never_show_none(page, shot, signed_in, tenant):
    owner = signed_in("owner")
    with database.atomic():
        audit.record(
            tenant_id=tenant.id,
            action="webhook.replayed",
            actor_type="user",
            actor_label=owner.email,
            target_id="wh_1",
            details={"since": "2026-11-21T09:00:00.000Z", "until": None, "replayed": 0},
        )
    menu(page).get_by_role("link", name="Audit log").click()
    expect(row(page, "webhook.replayed")).to_contain_text("until: —")
    shot("audit-log")  # fails on a None anywhere on the page
