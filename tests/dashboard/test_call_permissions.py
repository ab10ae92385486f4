"""Dashboard: a WhatsApp number's call permissions (checking a user's, asking a user), and a
campaign's contacts awaiting permission."""

import pytest

from app.services import billing
from tests.campaigns import created, sweep
from tests.dashboard.audit import changes
from tests.helpers import ACTOR
from tests.whatsapp import whatsapp_number

USER = "+6281234500007"


def text(response) -> str:
    return response.get_data(as_text=True)


@pytest.fixture
def number(tenant, agent_id):
    billing.grant(actor=ACTOR, tenant=tenant, minutes=100)
    return whatsapp_number(tenant, agent_id=agent_id)


def page(number) -> str:
    return f"/dashboard/phone-numbers/{number.id}/call-permissions"


def test_the_numbers_page_links_a_whatsapp_numbers_permissions(signed_in, number):
    body = text(signed_in.get("/dashboard/phone-numbers"))
    assert f'href="{page(number)}">Call permissions</a>' in body


def test_checking_a_user_shows_metas_answer(signed_in, number, fake_graph):
    fake_graph.grant(
        number.whatsapp_phone_number_id, USER, "temporary", expiration_time=1_800_000_000
    )
    response = signed_in.get(page(number), query_string={"to": USER})
    assert response.status_code == 200
    body = text(response)
    assert '<label for="check-to">WhatsApp number to check</label>' in body
    assert "<dt>Permission</dt><dd>temporary</dd>" in body
    assert "<dt>May call now</dt><dd>yes</dd>" in body
    assert "2027-01-15" in body


def test_an_invalid_user_number_is_shown_beside_the_input(signed_in, number, fake_graph):
    response = signed_in.get(page(number), query_string={"to": "0812"})
    assert response.status_code == 422
    assert "Must be an international number" in text(response)
    assert fake_graph.requests == []


def test_asking_a_user_sends_the_request_and_is_audited(signed_in, post, number, fake_graph):
    response = post(
        f"/dashboard/phone-numbers/{number.id}/call-permission-requests",
        {"to": USER, "text": ""},
        token_from=page(number),
    )
    assert response.status_code == 302
    (message,) = fake_graph.messages
    assert message["interactive"]["body"]["text"].startswith("Bolehkah kami menelepon")
    assert changes() == [("call_permission.requested", number.id, {"to": USER})]
    assert f"Call permission requested from {USER}." in text(signed_in.get(response.location))


def test_metas_refusal_is_shown_on_the_page(signed_in, post, number, fake_graph):
    fake_graph.fail["messages"] = "request_limit"
    response = post(
        f"/dashboard/phone-numbers/{number.id}/call-permission-requests",
        {"to": USER, "text": "Boleh kami telepon?"},
        token_from=page(number),
    )
    assert response.status_code == 429
    assert "1 call permission request a day and 2 a week" in text(response)


def test_a_phone_number_has_no_permissions_page(signed_in, did, tenant):
    from app.services import phone_numbers as number_service

    (phone,) = number_service.list_numbers(tenant=tenant)
    assert signed_in.get(page(phone)).status_code == 409


def test_a_viewer_sees_no_request_form(client, viewer, number):
    from tests.dashboard.conftest import sign_in

    sign_in(client, viewer.email)
    body = text(client.get(page(number)))
    assert "Check permission</button>" in body
    assert "Send permission request" not in body


def test_a_campaign_shows_its_contacts_awaiting_permission(
    signed_in, headers, client, number, fake_graph
):
    campaign_id = created(
        signed_in, headers, number.id, [USER], whatsapp={"requestPermission": True}
    )
    sweep()
    body = text(signed_in.get(f"/dashboard/campaigns/{campaign_id}"))
    assert '<dt>Awaiting permission</dt><dd id="awaiting-permission">1 ' in body
    assert "each is asked once" in body
