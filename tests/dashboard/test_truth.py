"""The dashboard says what is so: webhook health, a delivery log of one row per delivery,
every form problem at once in plain words, no Python None, a user enabled again, the
low-balance threshold, a call's number by its display number, the icon, the caller search."""

import re

import pytest

from app import queue
from app.db import database
from app.models import AuditEntry, Tenant, User, Webhook
from app.services import audit
from app.services import phone_numbers as number_service
from app.services import users as user_service
from app.services import webhooks as webhook_service
from tests.call_flow import whole_call
from tests.dashboard.audit import changes
from tests.dashboard.conftest import PASSWORD, csrf_token, sign_in
from tests.helpers import ACTOR
from tests.receiver import Answer, Receiver

SECRET = "a-very-secret-value-1234"


def text(response) -> str:
    return response.get_data(as_text=True)


@pytest.fixture
def failing(app, tenant):
    """A webhook whose receiver answers 500, after a delivery that succeeded: its id."""
    app.config["WEBHOOK_RETRY_SCALE"] = 1000  # the attempts are the ones the test makes
    status = {"code": 200}
    with Receiver(lambda request: Answer(status=status["code"])) as receiver:
        webhook = webhook_service.create_webhook(
            actor=ACTOR, tenant=tenant, url=receiver.url, events=["call.ended"], secret=SECRET
        )
        webhook_service.send_test(actor=ACTOR, tenant=tenant, webhook_id=webhook.id)
        assert queue.inline_worker(app).wait_idle(5)
        status["code"] = 500
        for _ in range(2):
            webhook_service.send_test(actor=ACTOR, tenant=tenant, webhook_id=webhook.id)
            assert queue.inline_worker(app).wait_idle(5)
    return webhook.id


def test_a_failing_webhook_is_failing_not_active_on_its_list_and_page(signed_in, failing):
    webhook = Webhook.get_by_id(failing)
    assert webhook.is_active and webhook.consecutive_failures == 2
    since = f"Failing since {webhook.failing_since:%Y-%m-%d %H:%M:%S} UTC"
    listed = text(signed_in.get("/dashboard/webhooks"))
    page = text(signed_in.get(f"/dashboard/webhooks/{failing}"))
    for body in (listed, page):
        assert since in body
        assert "Healthy" not in body and '<span class="ok">Yes</span>' not in body
        assert "never" not in body  # a delivery succeeded before the failures
    assert "<td>2</td>" in listed and "Failed attempts in a row</dt><dd>2</dd>" in page


def test_a_success_makes_a_webhook_healthy_again(app, signed_in, tenant):
    with Receiver() as receiver:
        webhook = webhook_service.create_webhook(
            actor=ACTOR, tenant=tenant, url=receiver.url, events=["call.ended"], secret=SECRET
        )
        Webhook.update(consecutive_failures=3, failing_since=webhook.created_at).execute()
        webhook_service.send_test(actor=ACTOR, tenant=tenant, webhook_id=webhook.id)
        assert queue.inline_worker(app).wait_idle(5)
    page = text(signed_in.get(f"/dashboard/webhooks/{webhook.id}"))
    assert '<span class="ok">Healthy</span>' in page and "Failing" not in page
    assert "Failed attempts in a row</dt><dd>0</dd>" in page


def test_a_disabled_webhook_says_why(signed_in, tenant):
    webhook = webhook_service.create_webhook(
        actor=ACTOR,
        tenant=tenant,
        url="http://127.0.0.1:9/in",
        events=["call.ended"],
        secret=SECRET,
    )
    Webhook.update(is_active=False, disabled_reason="Every delivery failed for 5 days.").execute()
    for path in ("/dashboard/webhooks", f"/dashboard/webhooks/{webhook.id}"):
        body = text(signed_in.get(path))
        assert "Disabled</span>: Every delivery failed for 5 days." in body
        assert "never" in body  # no delivery ever succeeded


def test_the_delivery_log_is_a_row_per_delivery_with_its_attempts_folded(signed_in, failing):
    page = text(signed_in.get(f"/dashboard/webhooks/{failing}"))
    log = page[page.index('<table class="deliveries">') :]
    rows = re.findall(r'<tr id="(dlv_\w+)">', log)
    assert len(rows) == 3  # the test events: one row each
    assert log.count("<details>") == 3 and "<details open" not in log
    summaries = re.findall(r"<summary>([^<]+)</summary>", log)
    assert summaries == ["1 attempt: last answered 500"] * 2 + ["1 attempt: last answered 200"]


def test_every_problem_of_a_function_form_shows_at_once_in_plain_words(signed_in, post, agent_id):
    form = {
        "name": "1st function",
        "description": "",
        "endpoint": "ftp://example.com/slots",
        "method": "POST",
        "parameters": '{"type": "object",',
        "timeoutMs": "fast",
    }
    response = post(f"/dashboard/agents/{agent_id}/functions", form)
    assert response.status_code == 422
    body = text(response)
    for message in (
        "Letters, digits and _, not starting with a digit.",
        "Use 1 to 1024 characters.",
        "The URL must start with http:// or https://.",
        "Not valid JSON (line 1, column 19).",
        "Enter a whole number.",
    ):
        assert message in body, message
    for wording in ("Missing data", "Not a valid", "Length must be", "Must be"):
        assert wording not in body, wording


def test_every_problem_of_a_webhook_form_shows_at_once(signed_in, post):
    form = {"url": "https://user:pw@hooks.example.com/in", "events": ["call.ending", ""]}
    body = text(post("/dashboard/webhooks/new", {**form, "secret": "short"}))
    assert "Choose one of call.started" in body and "Use 16 to 256 characters." in body
    assert "The URL must not contain a user name or password." in body  # with the others
    assert "Missing data" not in body


def test_the_audit_log_shows_values_as_words_never_none(signed_in, tenant, owner):
    with database.atomic():
        audit.record(
            tenant_id=tenant.id,
            action="webhook.replayed",
            actor_type="user",
            actor_label=owner.email,
            target_id="wh_1",
            details={"until": None, "fields": ["url", "events"], "replayed": 0, "on": True},
        )
    body = text(signed_in.get("/dashboard/settings/audit-log"))
    assert "until: —" in body and "fields: url, events" in body and "on: yes" in body
    assert not re.search(r"\bNone\b", body) and "[&#39;" not in body


def test_a_disabled_user_can_be_enabled_again(signed_in, post, client, tenant):
    user = user_service.create_user(
        actor=ACTOR, tenant=tenant, email="ana@acme.test", password=PASSWORD, role="admin"
    )
    user_service.disable(actor=ACTOR, user=user)
    team = text(signed_in.get("/dashboard/settings/team"))
    assert "Enable ana@acme.test" in team
    response = post(
        f"/dashboard/settings/team/{user.id}/enable", token_from="/dashboard/settings/team"
    )
    assert response.status_code == 302
    assert User.get_by_id(user.id).disabled_at is None
    entry = AuditEntry.select().order_by(AuditEntry.created_at.desc()).first()
    assert (entry.action, entry.target_id) == ("user.enabled", user.id)
    assert (entry.actor_type, entry.details) == ("user", {})
    client.post("/dashboard/sign-out", data={"csrf_token": csrf_token(client.get("/dashboard/"))})
    assert sign_in(client, "ana@acme.test").status_code == 302  # with the password they had


def test_an_admin_cannot_enable_a_user(client, tenant):
    admin = user_service.create_user(
        actor=ACTOR, tenant=tenant, email="admin@acme.test", password=PASSWORD, role="admin"
    )
    user = user_service.create_user(
        actor=ACTOR, tenant=tenant, email="ana@acme.test", password=PASSWORD, role="viewer"
    )
    user_service.disable(actor=ACTOR, user=user)
    sign_in(client, admin.email)
    token = csrf_token(client.get("/dashboard/"))
    response = client.post(f"/dashboard/settings/team/{user.id}/enable", data={"csrf_token": token})
    assert response.status_code == 403 and User.get_by_id(user.id).disabled_at is not None


def test_an_owner_sets_the_low_balance_threshold(signed_in, post, tenant, headers):
    page = signed_in.get("/dashboard/settings")
    assert page.status_code == 200 and 'value="10"' in text(page)
    response = post("/dashboard/settings", {"minutes": "25"}, token_from="/dashboard/settings")
    assert response.status_code == 302
    assert Tenant.get_by_id(tenant.id).low_balance_threshold == 25
    credits = signed_in.get("/api/v1/credits", headers=headers).json
    assert credits["lowBalanceThresholdMinutes"] == 25
    assert changes()[-1] == (
        "tenant.threshold_changed",
        tenant.id,
        {"fields": ["lowBalanceThresholdMinutes"]},
    )


@pytest.mark.parametrize("minutes", ["-1", "ten", ""])
def test_a_bad_threshold_is_refused_with_a_message(signed_in, post, tenant, minutes):
    response = post("/dashboard/settings", {"minutes": minutes}, token_from="/dashboard/settings")
    assert response.status_code == 422 and 'id="minutes-error"' in text(response)
    assert Tenant.get_by_id(tenant.id).low_balance_threshold == 10


@pytest.mark.parametrize("role", ["admin", "viewer"])
def test_the_settings_page_is_for_owners(client, tenant, role):
    user = user_service.create_user(
        actor=ACTOR, tenant=tenant, email=f"{role}@acme.test", password=PASSWORD, role=role
    )
    sign_in(client, user.email)
    assert client.get("/dashboard/settings").status_code == 403
    assert 'href="/dashboard/settings"' not in text(client.get("/dashboard/"))


def test_a_calls_page_names_its_number_by_its_display_number(signed_in, runtime_headers, did):
    call_id = whole_call(signed_in, runtime_headers, did)
    body = text(signed_in.get(f"/dashboard/calls/{call_id}"))
    number = number_service.list_numbers()[0]
    assert f'<dt>Phone number</dt><dd>{did} (Main) <span class="muted">{number.id}</span>' in body


def test_the_calls_can_be_searched_by_caller_number(signed_in, runtime_headers, did):
    from tests.call_flow import start

    ids = {
        caller: start(signed_in, runtime_headers, did, callerNumber=caller).json["id"]
        for caller in ("+6281234567890", "+6281300000000")
    }
    page = text(signed_in.get("/dashboard/calls?callerNumber=%2B62812*"))
    assert ids["+6281234567890"] in page and ids["+6281300000000"] not in page
    assert 'value="+62812*"' in page and '<label for="callerNumber">Caller number' in page
    refused = signed_in.get("/dashboard/calls?callerNumber=call+me")
    assert refused.status_code == 422 and "in international format" in text(refused)


def test_the_icon_is_served_and_linked_from_every_page(client, signed_in):
    with client.get("/favicon.ico") as icon:
        assert icon.status_code == 200 and icon.mimetype == "image/vnd.microsoft.icon"
        assert icon.data[:4] == b"\x00\x00\x01\x00"  # an ICO file
    for path in ("/dashboard/", "/dashboard/sign-in", "/dashboard/calls"):
        assert '<link rel="icon" href="/favicon.ico">' in text(signed_in.get(path))


def test_the_overview_chart_table_is_hidden_inside_a_box(signed_in):
    """A table box is as tall as its rows whatever its own size: the hidden one is wrapped."""
    body = text(signed_in.get("/dashboard/"))
    assert '<div class="visually-hidden">\n  <table>' in body
    assert '<table class="visually-hidden">' not in body


def test_no_secret_reaches_the_audit_log_of_a_rotation(signed_in, post, tenant):
    webhook = webhook_service.create_webhook(
        actor=ACTOR,
        tenant=tenant,
        url="http://127.0.0.1:9/in",
        events=["call.ended"],
        secret=SECRET,
    )
    path = f"/dashboard/webhooks/{webhook.id}/rotate-secret"
    post(path, {"overlapHours": "24"}, token_from=path)
    new = Webhook.get_by_id(webhook.id).secret
    stored = str(list(AuditEntry.select().dicts()))
    assert new not in stored and SECRET not in stored


def test_the_cli_enables_a_disabled_user(runner, client, tenant):
    user_service.create_user(
        actor=ACTOR, tenant=tenant, email="ann@acme.test", password=PASSWORD, role="viewer"
    )
    assert runner.invoke(args=["users", "disable", "--email", "ann@acme.test"]).exit_code == 0
    assert sign_in(client, "ann@acme.test").status_code == 401
    enabled = runner.invoke(args=["users", "enable", "--email", "ann@acme.test"])
    assert enabled.exit_code == 0 and "Enabled ann@acme.test" in enabled.output
    again = runner.invoke(args=["users", "enable", "--email", "ann@acme.test"])
    assert "is not disabled" in again.output
    assert sign_in(client, "ann@acme.test").status_code == 302
    entries = audit.list_entries(tenant=tenant, limit=20, offset=0).items
    cli = [entry.action for entry in entries if entry.actor_type == "cli"]
    assert cli[:2] == ["user.enabled", "user.disabled"]
    unknown = runner.invoke(args=["users", "enable", "--email", "nobody@acme.test"])
    assert unknown.exit_code == 1
