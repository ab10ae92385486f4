"""Dashboard phone numbers: the list and assigning an agent to a number."""

import pytest

from app.services import phone_numbers as number_service
from app.services.whatsapp import accounts as account_service
from tests.dashboard.audit import changes
from tests.dashboard.conftest import csrf_token, sign_in
from tests.fake_graph import number as listed_number
from tests.helpers import ACTOR

NUMBERS = "/dashboard/phone-numbers"


def text(response) -> str:
    return response.get_data(as_text=True)


@pytest.fixture
def number(tenant):
    return number_service.add_number(
        actor=ACTOR, tenant=tenant, display_number="+6221555020", label="Sales"
    )


@pytest.fixture
def second_agent_id(client, headers):
    body = {"name": "Sales desk", "systemPrompt": "Sell."}
    return client.post("/api/v1/agents", json=body, headers=headers).json["id"]


def api_number(client, headers, number_id):
    numbers = client.get("/api/v1/phone-numbers", headers=headers).json["phoneNumbers"]
    return next(number for number in numbers if number["id"] == number_id)


def test_numbers_page_lists_number_label_active_and_agent(signed_in, did, number, agent_id):
    page = signed_in.get(NUMBERS)
    assert page.status_code == 200
    body = text(page)
    assert "<h1>Phone numbers</h1>" in body
    assert did in body and "+6221555020" in body and "Sales" in body
    assert f'href="/dashboard/agents/{agent_id}">Reception</a>' in body
    assert "No agent</span>" in body  # +6221555020 has none
    for header in ("Number", "Label", "Active", "Assigned agent"):
        assert f'<th scope="col">{header}</th>' in body
    assert f'<label for="agent-{number.id}"' in body and "Assign agent</button>" in body


def test_assign_an_agent_shows_in_the_api(signed_in, post, headers, number, agent_id):
    response = post(f"{NUMBERS}/{number.id}/assign-agent", {"agentId": agent_id})
    assert response.status_code == 302 and response.headers["Location"] == NUMBERS
    assert api_number(signed_in, headers, number.id)["agentId"] == agent_id
    page = text(signed_in.get(NUMBERS))
    assert "+6221555020 is answered by Reception, at its latest version." in page
    assert f'<option value="{agent_id}" selected>Reception</option>' in page
    assert changes() == [("number.assigned", number.id, {"agentId": agent_id})]


def test_no_agent_unassigns_the_number(signed_in, post, headers, tenant, did, agent_id):
    [number] = number_service.list_numbers(tenant=tenant)
    response = post(f"{NUMBERS}/{number.id}/assign-agent", {"agentId": ""})
    assert response.status_code == 302
    assert api_number(signed_in, headers, number.id)["agentId"] is None
    assert "has no agent now" in text(signed_in.get(NUMBERS))
    assert changes() == [("number.assigned", number.id, {"agentId": None})]


def test_reassigning_moves_the_number_to_another_agent(
    signed_in, post, headers, tenant, did, agent_id, second_agent_id
):
    [number] = number_service.list_numbers(tenant=tenant)
    post(f"{NUMBERS}/{number.id}/assign-agent", {"agentId": second_agent_id})
    assert api_number(signed_in, headers, number.id)["agentId"] == second_agent_id


def test_a_form_without_agent_shows_the_message(signed_in, post, headers, number):
    response = post(f"{NUMBERS}/{number.id}/assign-agent", {})
    assert response.status_code == 422
    body = text(response)
    assert f'id="agent-{number.id}-error"' in body and "Fill this in." in body
    assert api_number(signed_in, headers, number.id)["agentId"] is None


def test_a_viewer_sees_numbers_without_forms_and_cannot_assign(
    client, viewer, headers, number, agent_id
):
    sign_in(client, viewer.email)
    page = client.get(NUMBERS)
    assert page.status_code == 200
    body = text(page).split("</header>", 1)[1]
    assert "+6221555020" in body and "Assign agent" not in body and "<form" not in body
    token = csrf_token(client.get("/dashboard/"))
    response = client.post(
        f"{NUMBERS}/{number.id}/assign-agent", data={"agentId": agent_id, "csrf_token": token}
    )
    assert response.status_code == 403
    assert api_number(client, headers, number.id)["agentId"] is None


def test_another_tenants_number_or_agent_is_404(
    signed_in, post, headers, other_tenant, other_headers, number, agent_id
):
    theirs = number_service.add_number(
        actor=ACTOR, tenant=other_tenant, display_number="+6221555099"
    )
    their_agent = signed_in.post(
        "/api/v1/agents", json={"name": "Globex", "systemPrompt": "x"}, headers=other_headers
    ).json["id"]
    assert post(f"{NUMBERS}/{theirs.id}/assign-agent", {"agentId": agent_id}).status_code == 404
    response = post(f"{NUMBERS}/{number.id}/assign-agent", {"agentId": their_agent})
    assert response.status_code == 404 and response.content_type.startswith("text/html")
    assert api_number(signed_in, headers, number.id)["agentId"] is None
    [listed] = signed_in.get("/api/v1/phone-numbers", headers=other_headers).json["phoneNumbers"]
    assert listed["agentId"] is None
    assert "+6221555099" not in text(signed_in.get(NUMBERS))
    assert "Globex" not in text(signed_in.get(NUMBERS))


def test_a_deleted_agent_cannot_be_assigned(signed_in, post, headers, number, agent_id):
    signed_in.delete(f"/api/v1/agents/{agent_id}", headers=headers)
    response = post(f"{NUMBERS}/{number.id}/assign-agent", {"agentId": agent_id})
    assert response.status_code == 404


def test_assign_without_csrf_token_is_refused(signed_in, headers, number, agent_id):
    response = signed_in.post(f"{NUMBERS}/{number.id}/assign-agent", data={"agentId": agent_id})
    assert response.status_code == 400
    assert api_number(signed_in, headers, number.id)["agentId"] is None


@pytest.mark.parametrize(
    "value", ["", " ", "\x00", "a\x00", "' OR 1=1 --", "x" * 70_000, "null", "agent_", "%00"]
)
def test_junk_agent_ids_are_never_a_500(signed_in, post, number, value):
    response = post(f"{NUMBERS}/{number.id}/assign-agent", {"agentId": value})
    assert response.status_code in (302, 404, 422), response.status_code
    response = post(f"{NUMBERS}/{value or 'x'}/assign-agent", {"agentId": ""})
    assert response.status_code in (404, 405, 414), response.status_code


def test_numbers_page_shows_each_numbers_channel(signed_in, tenant, number, fake_graph):
    token = "EAAG-dashboard-token-0001"
    fake_graph.add_waba("9301", token, [listed_number("9311", "+62 811-930-0001", rating="RED")])
    account_service.link(
        actor=ACTOR, tenant=tenant, waba_id="9301", access_token=token, app_secret="dash-secret"
    )
    body = text(signed_in.get(NUMBERS))
    assert '<th scope="col">Channel</th>' in body
    assert "<td>Phone</td>" in body
    assert 'WhatsApp <span class="muted">(quality red)</span>' in body
    assert token not in body and "dash-secret" not in body
