"""Campaigns in the dashboard: created from an uploaded or pasted CSV, its progress and
per-contact results, pause, resume and cancel; and "Call a number" on an agent's page."""

import io
import re
import secrets

import pytest

from app.models import AuditEntry, Call, Campaign, CampaignContact
from app.services import phone_numbers as number_service
from app.services import tenants as tenant_service
from tests.campaigns import answered, claim, created, numbers, sweep, unanswered
from tests.dashboard.conftest import csrf_token, sign_in
from tests.helpers import ACTOR

CSV = "to,name,time\n+6281300000001,Budi,10:00\n+6281300000002,Ani,\n"


@pytest.fixture
def number_id(did, tenant):
    (number,) = number_service.list_numbers(tenant=tenant)
    return number.id


def form(number_id, **fields):
    return {
        "name": "Reminders",
        "phoneNumberId": number_id,
        "agentId": "",
        "contacts": "",
        "maxConcurrentCalls": "2",
        "timezone": "",
        "days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun", ""],
        "start": "",
        "end": "",
        "maxAttempts": "1",
        "delayMinutes": "60",
        "retryOn": ["no_answer", "busy", ""],
        **fields,
    }


def send(signed_in, data, path="/dashboard/campaigns/new"):
    token = csrf_token(signed_in.get("/dashboard/campaigns/new"))
    return signed_in.post(
        path, data={**data, "csrf_token": token, "form_id": secrets.token_urlsafe(16)}
    )


def test_the_menu_leads_to_campaigns(signed_in):
    page = signed_in.get("/dashboard/campaigns")
    assert page.status_code == 200
    text = page.get_data(True)
    assert "<h1>Campaigns</h1>" in text and "No campaigns yet." in text
    assert 'href="/dashboard/campaigns"' in signed_in.get("/dashboard/").get_data(True)


def test_an_uploaded_csv_makes_a_campaign_with_each_rows_variables(signed_in, number_id):
    data = form(number_id, contactsFile=(io.BytesIO(CSV.encode()), "people.csv"))
    response = send(signed_in, data)
    assert response.status_code == 302, response.get_data(True)
    campaign = Campaign.get()
    assert response.headers["Location"] == f"/dashboard/campaigns/{campaign.id}"
    assert (campaign.name, campaign.total_count, campaign.max_concurrent_calls) == (
        "Reminders",
        2,
        2,
    )
    contacts = CampaignContact.select().order_by(CampaignContact.seq)
    assert [(c.to_number, c.variables) for c in contacts] == [
        ("+6281300000001", {"name": "Budi", "time": "10:00"}),
        ("+6281300000002", {"name": "Ani"}),
    ]
    entry = AuditEntry.get(AuditEntry.action == "campaign.created")
    assert (entry.actor_type, entry.actor_label) == ("user", "owner@acme.test")
    page = signed_in.get(response.headers["Location"]).get_data(True)
    assert "Campaign Reminders created with 2 contacts" in page
    assert "name=Budi, time=10:00" in page


def test_pasted_numbers_without_a_header_make_a_campaign(signed_in, number_id):
    data = form(
        number_id,
        contacts="+6281300000001\n\n+6281300000002\n",
        timezone="Asia/Jakarta",
        start="09:00",
        end="17:00",
    )
    assert send(signed_in, data).status_code == 302
    campaign = Campaign.get()
    assert (campaign.total_count, campaign.timezone, campaign.window_start) == (
        2,
        "Asia/Jakarta",
        "09:00",
    )


def test_every_problem_of_the_form_is_shown_at_once_by_row(signed_in, number_id):
    contacts = "to,name\n+6281300000001,Budi\n0813,Ani\n+6281300000003,Eko,extra\n"
    data = form(
        number_id,
        contacts=contacts,
        name="",
        timezone="Mars/Olympus",
        start="09:00",
        end="08:00",
        maxAttempts="9",
        retryOn=[""],
    )
    response = send(signed_in, data)
    assert response.status_code == 422
    text = response.get_data(True)
    assert "Row 4: 2 values after the number, but the header row names 1 variables." in text
    assert "Row 3: to: Must be an international number such as +6281234567890." in text
    assert "Must be an IANA time zone such as Asia/Jakarta." in text
    assert "Enter a number from 1 to 5." in text
    assert "Fill this in." in text or "Use 1 to 100 characters." in text
    assert Campaign.select().count() == 0


def test_more_calls_at_once_than_the_tenant_may_have_is_shown_on_the_form(
    signed_in, number_id, tenant
):
    tenant_service.set_plan(actor=ACTOR, tenant=tenant, plan="business", concurrent_calls=3)
    response = send(signed_in, form(number_id, contacts=CSV, maxConcurrentCalls="4"))
    assert response.status_code == 422
    assert "At most the tenant&#39;s concurrent-call limit, 3, not 4." in response.get_data(True)


def test_a_campaigns_page_shows_its_progress_and_results(
    signed_in, headers, runtime_headers, number_id
):
    campaign_id = created(signed_in, headers, number_id, numbers(3), maxConcurrentCalls=2)
    sweep()
    first, second = claim(signed_in, runtime_headers)
    answered(signed_in, runtime_headers, first["id"])
    unanswered(signed_in, runtime_headers, second["id"], "busy")
    text = signed_in.get(f"/dashboard/campaigns/{campaign_id}").get_data(True)
    assert "Progress: 2 of 3 contacts done" in text
    assert '<progress id="progress" value="2" max="3">' in text
    rows = re.findall(r"<tr>\s*<td>(\d+)</td>(.*?)</tr>", text, re.S)
    cells = [[c.strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)] for _, row in rows]
    assert [row[2] for row in cells] == ["completed", "failed", "pending"]
    assert cells[1][4] == "Busy"
    assert f'href="/dashboard/calls/{first["id"]}"' in text
    failed = signed_in.get(f"/dashboard/campaigns/{campaign_id}?status=failed").get_data(True)
    assert numbers(3)[1] in failed and numbers(3)[0] not in failed


def test_pause_resume_and_cancel_from_the_page(signed_in, headers, number_id):
    campaign_id = created(signed_in, headers, number_id, numbers(2))
    path = f"/dashboard/campaigns/{campaign_id}"
    page = signed_in.get(path)
    token = csrf_token(page)
    assert ">Pause</button>" in page.get_data(True)
    assert signed_in.post(f"{path}/pause", data={"csrf_token": token}).status_code == 302
    page = signed_in.get(path).get_data(True)
    assert "paused: no new calls are placed" in page and ">Resume</button>" in page
    signed_in.post(f"{path}/resume", data={"csrf_token": token})
    assert Campaign.get_by_id(campaign_id).status == "running"
    confirm = signed_in.get(f"{path}/cancel")
    assert "Cancel the campaign Reminders for good?" in confirm.get_data(True)
    signed_in.post(f"{path}/cancel", data={"csrf_token": csrf_token(confirm)})
    page = signed_in.get(path).get_data(True)
    assert '<dd id="campaign-status">canceled</dd>' in page
    assert ">Pause</button>" not in page and ">Resume</button>" not in page
    actions = {entry.action for entry in AuditEntry.select()}
    assert {"campaign.paused", "campaign.resumed", "campaign.canceled"} <= actions


def test_a_viewer_sees_a_campaign_without_its_buttons(client, headers, number_id, viewer):
    campaign_id = created(client, headers, number_id, numbers(1))
    sign_in(client, viewer.email)
    page = client.get(f"/dashboard/campaigns/{campaign_id}").get_data(True)
    assert ">Pause</button>" not in page and "Cancel campaign" not in page
    assert client.get("/dashboard/campaigns/new").status_code == 403


def test_another_tenants_campaign_is_404(signed_in, other_headers, other_tenant):
    from app.services import agents as agent_service
    from app.services import billing

    number = number_service.add_number(
        actor=ACTOR, tenant=other_tenant, display_number="+6221555030"
    )
    agent = agent_service.create_agent(
        actor=ACTOR, tenant=other_tenant, name="Theirs", system_prompt="x"
    )
    number_service.assign_agent(
        actor=ACTOR, tenant=other_tenant, number_id=number.id, agent_id=agent.id
    )
    billing.grant(actor=ACTOR, tenant=other_tenant, minutes=5)
    campaign_id = created(signed_in, other_headers, number.id, numbers(1))
    assert signed_in.get(f"/dashboard/campaigns/{campaign_id}").status_code == 404
    assert signed_in.get(f"/dashboard/campaigns/{campaign_id}/cancel").status_code == 404


def test_call_a_number_from_an_agents_page(signed_in, agent_id, number_id, did):
    page = signed_in.get(f"/dashboard/agents/{agent_id}/calls")
    assert '<h2 id="call">Call a number</h2>' in page.get_data(True)
    data = {
        "phoneNumberId": number_id,
        "to": "+6281300000009",
        "variables": '{"name": "Budi"}',
        "csrf_token": csrf_token(page),
    }
    response = signed_in.post(f"/dashboard/agents/{agent_id}/call", data=data)
    assert response.status_code == 302, response.get_data(True)
    call = Call.get()
    assert response.headers["Location"] == f"/dashboard/calls/{call.id}"
    assert (call.status, call.direction, call.callee_number, call.caller_number) == (
        "queued",
        "outbound",
        "+6281300000009",
        did,
    )
    assert call.variables == {"name": "Budi"}
    assert AuditEntry.get(AuditEntry.action == "call.placed").actor_type == "user"


def test_a_bad_number_to_call_is_shown_next_to_its_field(signed_in, agent_id, number_id):
    page = signed_in.get(f"/dashboard/agents/{agent_id}/calls")
    data = {
        "phoneNumberId": number_id,
        "to": "0813",
        "variables": "{",
        "csrf_token": csrf_token(page),
    }
    response = signed_in.post(f"/dashboard/agents/{agent_id}/call", data=data)
    assert response.status_code == 422
    text = response.get_data(True)
    assert "Must be an international number such as +6281234567890." in text
    assert "Not valid JSON" in text
    assert Call.select().count() == 0


def test_the_form_shows_no_hours_and_hours_without_a_time_zone_are_refused(signed_in, number_id):
    page = signed_in.get("/dashboard/campaigns/new").get_data(True)
    assert 'value="09:00"' not in page and 'value="17:00"' not in page
    data = form(number_id, contacts="+6281300000001\n", start="09:00", end="17:00")
    response = send(signed_in, data)
    assert response.status_code == 422
    assert "Give a time zone for the calling days and hours" in response.get_data(True)
    data = form(number_id, contacts="+6281300000001\n", days=["mon", ""])
    assert send(signed_in, data).status_code == 422
    assert Campaign.select().count() == 0
    assert send(signed_in, form(number_id, contacts="+6281300000001\n")).status_code == 302
    assert Campaign.get().timezone is None
