"""Overview: balance, the chart of the last 30 days, the answered share, failing webhooks."""

import re
from datetime import timedelta

from app import queue
from app.util import utcnow
from tests.call_flow import end, start, whole_call
from tests.dashboard.conftest import sign_in
from tests.helpers import ACTOR
from tests.receiver import Answer, Receiver


def bar_title(page, day) -> str:
    """The tooltip of the chart's bar of day."""
    match = re.search(rf'<rect data-day="{day}"[^>]*><title>([^<]*)</title>', page.get_data(True))
    assert match, f"no bar for {day}"
    return match.group(1)


def table_row(page, day) -> list[str]:
    """The cells of day's row in the chart's table for screen readers."""
    match = re.search(rf'<tr data-day="{day}">(.*?)</tr>', page.get_data(True), re.S)
    assert match, f"no row for {day}"
    return re.findall(r"<t[hd][^>]*>([^<]*)</t[hd]>", match.group(1))


def test_overview_shows_the_balance_and_a_chart_of_30_days(signed_in, tenant):
    page = signed_in.get("/dashboard/")
    assert page.status_code == 200
    text = page.get_data(True)
    assert text.count("<h1>") == 1 and "<h1>Overview</h1>" in text
    assert '<svg class="chart" role="img" aria-labelledby="chart-title chart-desc"' in text
    assert len(re.findall(r"<rect data-day=", text)) == 30
    today = utcnow().date()
    assert bar_title(page, today - timedelta(days=29)) == (
        f"{today - timedelta(days=29)}: 0 calls, 0 min billed"
    )
    assert f'data-day="{today - timedelta(days=30)}"' not in text
    assert "No calls" in text  # the answered share without calls
    assert "No active webhook is failing." in text
    menu = re.search(r'<nav aria-label="Main">(.*?)</nav>', text, re.S).group(1)
    assert {"Overview", "Calls", "Credits"} <= set(re.findall(r">([^<]+)</a>", menu))


def test_a_call_through_the_runtime_shows_on_todays_bar(signed_in, runtime_headers, did, headers):
    whole_call(signed_in, runtime_headers, did)  # 80 s of talk: 2 minutes billed
    page = signed_in.get("/dashboard/")
    today = utcnow().date()
    assert bar_title(page, today) == f"{today}: 1 call, 2 min billed"
    assert table_row(page, today) == [str(today), "1", "1", "2"]
    assert (
        table_row(page, today - timedelta(days=1)) == [str(today - timedelta(days=1))] + ["0"] * 3
    )
    text = page.get_data(True)
    assert f"1 call, 2 minutes billed in 30 days; busiest day {today} with 1 call." in text
    balance = signed_in.get("/api/v1/credits", headers=headers).json["balanceMinutes"]
    assert f"<dd>{balance} min</dd>" in text


def test_the_answered_share_counts_calls_answered_of_all(signed_in, runtime_headers, did):
    whole_call(signed_in, runtime_headers, did)
    unanswered = start(signed_in, runtime_headers, did).json["id"]
    response = end(signed_in, runtime_headers, unanswered, status="dropped", talkTimeSeconds=0)
    assert response.status_code == 200
    text = signed_in.get("/dashboard/").get_data(True)
    assert "<dd>50%</dd>" in text
    assert "1 of 2 calls" in text


def test_a_failing_webhook_is_listed(app, signed_in, headers, runtime_headers, did):
    with Receiver(lambda request: Answer(500, body=b"down")) as receiver:
        created = signed_in.post(
            "/api/v1/webhooks",
            json={
                "url": receiver.url + "/hooks",
                "events": ["call.started"],
                "secret": "a-very-secret-value-1234",
            },
            headers=headers,
        )
        assert created.status_code == 201
        start(signed_in, runtime_headers, did)
        receiver.wait_for(1)
        assert queue.inline_worker(app).wait_idle(5)
    text = signed_in.get("/dashboard/").get_data(True)
    assert "Failing webhooks" in text
    assert receiver.url + "/hooks" in text
    assert "its deliveries fail since" in text
    assert "No active webhook is failing." not in text


def test_a_disabled_webhook_is_not_listed_as_failing(app, signed_in, headers, tenant):
    from app.models import Webhook

    created = signed_in.post(
        "/api/v1/webhooks",
        json={
            "url": "http://127.0.0.1:9/hooks",
            "events": ["call.started"],
            "secret": "a-very-secret-value-1234",
        },
        headers=headers,
    ).json
    patched = signed_in.patch(
        f"/api/v1/webhooks/{created['id']}", json={"isActive": False}, headers=headers
    )
    assert patched.status_code == 200
    Webhook.update(failing_since=utcnow()).where(Webhook.id == created["id"]).execute()
    text = signed_in.get("/dashboard/").get_data(True)
    assert "No active webhook is failing." in text


def test_another_tenants_calls_are_not_charted(client, other_tenant, tenant, runtime_headers, did):
    from app.services import users as user_service
    from tests.dashboard.conftest import PASSWORD

    whole_call(client, runtime_headers, did)
    user_service.create_user(
        actor=ACTOR, tenant=other_tenant, email="owner@globex.test", password=PASSWORD, role="owner"
    )
    assert sign_in(client, "owner@globex.test").status_code == 302
    page = client.get("/dashboard/")
    today = utcnow().date()
    assert bar_title(page, today) == f"{today}: 0 calls, 0 min billed"


def test_a_viewer_sees_the_overview(client, viewer):
    assert sign_in(client, viewer.email).status_code == 302
    page = client.get("/dashboard/")
    assert page.status_code == 200 and "<h1>Overview</h1>" in page.get_data(True)
