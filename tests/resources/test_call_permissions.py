"""Call permissions of WhatsApp numbers against the Graph API stand-in: checking a user's
permission, asking for it, and outbound calls that need it."""

import threading
import time

import pytest

from app.models import AuditEntry, Call, CallPermission
from app.services import billing
from app.util import utcnow
from tests.helpers import ACTOR, assert_error
from tests.whatsapp import TOKEN, whatsapp_number

USER = "+6281234500001"
EXPIRES = 1_800_000_000  # 2027-01-15T08:00:00Z


@pytest.fixture
def number(tenant, agent_id):
    billing.grant(actor=ACTOR, tenant=tenant, minutes=100)
    return whatsapp_number(tenant, agent_id=agent_id)


def check(client, headers, number_id, to=USER):
    return client.get(
        f"/api/v1/phone-numbers/{number_id}/call-permissions",
        query_string={"to": to},
        headers=headers,
    )


def ask(client, headers, number_id, **body):
    return client.post(
        f"/api/v1/phone-numbers/{number_id}/call-permission-requests",
        json={"to": USER, **body},
        headers=headers,
    )


def test_a_user_without_permission_is_no_permission_and_may_be_asked(
    client, headers, number, fake_graph
):
    response = check(client, headers, number.id)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.json == {
        "to": USER,
        "status": "no_permission",
        "expiresAt": None,
        "canCall": False,
        "canRequest": True,
    }
    (request,) = fake_graph.requests
    meta_id = number.whatsapp_phone_number_id
    assert request.path == f"/v23.0/{meta_id}/call_permissions?user_wa_id=6281234500001"
    assert fake_graph.tokens_seen() == [TOKEN]
    stored = CallPermission.get(user_number=USER)
    assert (stored.status, stored.can_call, stored.can_request) == ("no_permission", False, True)


def test_a_temporary_permission_has_its_expiry_and_is_stored(client, headers, number, fake_graph):
    fake_graph.grant(number.whatsapp_phone_number_id, USER, "temporary", expiration_time=EXPIRES)
    response = check(client, headers, number.id)
    assert response.status_code == 200
    assert response.json == {
        "to": USER,
        "status": "temporary",
        "expiresAt": "2027-01-15T08:00:00.000Z",
        "canCall": True,
        "canRequest": False,
    }
    stored = CallPermission.get(user_number=USER)
    assert (stored.status, stored.can_call) == ("temporary", True)
    assert stored.expires_at.isoformat() == "2027-01-15T08:00:00"


def test_a_permanent_permission_replaces_the_stored_answer(client, headers, number, fake_graph):
    assert check(client, headers, number.id).json["status"] == "no_permission"
    fake_graph.grant(number.whatsapp_phone_number_id, USER, "permanent")
    response = check(client, headers, number.id)
    assert response.json["status"] == "permanent"
    assert (response.json["expiresAt"], response.json["canCall"]) == (None, True)
    assert CallPermission.select().count() == 1
    assert CallPermission.get(user_number=USER).status == "permanent"


def test_metas_answer_is_read_tolerantly(client, headers, number, fake_graph):
    fake_graph.grant(
        number.whatsapp_phone_number_id, USER, "something_new", can_call="yes", can_request=1
    )
    response = check(client, headers, number.id)
    assert response.json == {
        "to": USER,
        "status": "no_permission",
        "expiresAt": None,
        "canCall": False,
        "canRequest": True,
    }


def test_a_phone_number_has_no_call_permissions(client, headers, did, tenant):
    from app.services import phone_numbers as number_service

    (phone,) = number_service.list_numbers(tenant=tenant)
    error = assert_error(check(client, headers, phone.id), 409, "not_whatsapp")
    assert error["details"] == {"phoneNumberId": phone.id, "channel": "phone"}
    assert_error(ask(client, headers, phone.id), 409, "not_whatsapp")


def test_an_invalid_number_is_422(client, headers, number, fake_graph):
    error = assert_error(check(client, headers, number.id, to="0812"), 422, "validation_error")
    assert "to" in error["details"]
    assert_error(ask(client, headers, number.id, to="abc"), 422, "validation_error")
    assert fake_graph.requests == []


def test_another_tenants_number_is_404(client, other_headers, number, fake_graph):
    assert_error(check(client, other_headers, number.id), 404, "not_found")
    assert_error(ask(client, other_headers, number.id), 404, "not_found")
    response = client.post(
        "/api/v1/calls", json={"phoneNumberId": number.id, "to": USER}, headers=other_headers
    )
    assert_error(response, 404, "not_found")
    assert fake_graph.requests == []


def test_metas_failure_is_the_documented_error(client, headers, number, fake_graph):
    fake_graph.fail[TOKEN] = "server"
    assert_error(check(client, headers, number.id), 502, "whatsapp_unavailable")
    fake_graph.fail[TOKEN] = "auth"
    assert_error(check(client, headers, number.id), 422, "whatsapp_auth_failed")
    assert CallPermission.select().count() == 0


def test_a_request_is_an_interactive_message_with_the_default_text(
    client, headers, number, fake_graph
):
    response = ask(client, headers, number.id)
    assert response.status_code == 202, response.get_data(as_text=True)
    assert response.json == {"to": USER, "status": "requested", "messageId": "wamid.fake1"}
    (message,) = fake_graph.messages
    assert message == {
        "from": number.whatsapp_phone_number_id,
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": "6281234500001",
        "type": "interactive",
        "interactive": {
            "type": "call_permission_request",
            "action": {"name": "call_permission_request"},
            "body": {
                "text": "Bolehkah kami menelepon Anda melalui WhatsApp? Ketuk tombol di "
                "bawah untuk memberi izin."
            },
        },
    }
    assert CallPermission.get(user_number=USER).last_requested_at is not None
    entry = AuditEntry.get(AuditEntry.action == "call_permission.requested")
    assert (entry.target_id, entry.details) == (number.id, {"to": USER})
    assert TOKEN not in str(entry.details)


def test_a_request_with_text_or_a_template(client, headers, number, fake_graph):
    assert ask(client, headers, number.id, text="Boleh kami telepon?").status_code == 202
    template = {"name": "izin_telepon", "language": "id"}
    assert ask(client, headers, number.id, template=template).status_code == 202
    first, second = fake_graph.messages
    assert first["interactive"]["body"] == {"text": "Boleh kami telepon?"}
    assert second["type"] == "template"
    assert second["template"] == {"name": "izin_telepon", "language": {"code": "id"}}
    entry = AuditEntry.select().where(AuditEntry.action == "call_permission.requested")
    assert sorted(each.details.get("template", "") for each in entry) == ["", "izin_telepon"]


def test_text_and_a_template_together_are_422(client, headers, number, fake_graph):
    response = ask(client, headers, number.id, text="Hi", template={"name": "t", "language": "id"})
    error = assert_error(response, 422, "validation_error")
    assert "template" in error["details"]
    assert fake_graph.requests == []


def test_metas_request_limit_is_429(client, headers, number, fake_graph):
    fake_graph.fail["messages"] = "request_limit"
    error = assert_error(ask(client, headers, number.id), 429, "permission_request_limited")
    assert error["details"] == {"metaCode": 138009}
    assert AuditEntry.select().where(AuditEntry.action == "call_permission.requested").count() == 0


def test_free_form_text_outside_the_window_is_409(client, headers, number, fake_graph):
    fake_graph.fail["messages"] = "window_closed"
    error = assert_error(ask(client, headers, number.id), 409, "whatsapp_window_closed")
    assert "template" in error["message"]


def place(client, headers, number_id, to=USER):
    return client.post(
        "/api/v1/calls", json={"phoneNumberId": number_id, "to": to}, headers=headers
    )


def test_an_outbound_call_without_permission_is_409_and_creates_no_call(
    client, headers, number, fake_graph
):
    error = assert_error(place(client, headers, number.id), 409, "no_call_permission")
    assert error["details"] == {"status": "no_permission", "canRequest": True}
    assert Call.select().count() == 0
    assert len(fake_graph.requests) == 1  # Meta was asked


def test_an_outbound_call_with_permission_is_queued(client, headers, number, fake_graph):
    fake_graph.grant(number.whatsapp_phone_number_id, USER, "temporary", expiration_time=EXPIRES)
    response = place(client, headers, number.id)
    assert response.status_code == 201, response.get_data(as_text=True)
    assert (response.json["callerNumber"], response.json["calleeNumber"]) == (
        number.display_number,
        USER,
    )
    # The stored grant is trusted while it is valid: the second call asks Meta nothing.
    assert place(client, headers, number.id).status_code == 201
    assert len(fake_graph.requests) == 1


def test_an_expired_stored_grant_is_asked_again(client, headers, number, fake_graph):
    CallPermission.create(
        phone_number=number.id,
        user_number=USER,
        status="temporary",
        expires_at=utcnow().replace(year=2020),
        can_call=True,
    )
    assert_error(place(client, headers, number.id), 409, "no_call_permission")
    assert len(fake_graph.requests) == 1


def test_meta_slow_for_one_tenant_does_not_hold_another_tenants_check(
    app, client, headers, number, other_tenant, other_headers, fake_graph
):
    app.config["WHATSAPP_GRAPH_TIMEOUT"] = 3.0
    other = whatsapp_number(
        other_tenant, display="+6281100000002", meta_id="1100002", token="EAAG-other-token"
    )
    fake_graph.fail[TOKEN] = ("slow", 2.5)
    slow = threading.Thread(target=check, args=(app.test_client(), headers, number.id))
    slow.start()
    try:
        time.sleep(0.2)
        started = time.monotonic()
        response = check(client, other_headers, other.id)
        took = time.monotonic() - started
    finally:
        slow.join()
    assert response.status_code == 200, response.get_data(as_text=True)
    assert took < 1.0


def test_an_outbound_call_with_an_idempotency_key_is_checked_once_and_replayed(
    client, headers, number, fake_graph
):
    keyed = {**headers, "Idempotency-Key": "call-budi-1"}
    refused = place(client, keyed, number.id)
    assert_error(refused, 409, "no_call_permission")
    fake_graph.grant(number.whatsapp_phone_number_id, USER, "permanent")
    keyed = {**headers, "Idempotency-Key": "call-budi-2"}
    first = place(client, keyed, number.id)
    assert first.status_code == 201, first.get_data(as_text=True)
    again = place(client, keyed, number.id)
    assert again.status_code == 201 and again.json["id"] == first.json["id"]
    assert Call.select().count() == 1
    assert CallPermission.get(user_number=USER).status == "permanent"
