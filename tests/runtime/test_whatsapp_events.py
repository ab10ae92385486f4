"""POST /internal/v1/whatsapp/events: Meta's messages, forwarded by the runtime; call
permission replies update the number's record of the user, anything else is ignored."""

import pytest

from app.models import CallPermission
from tests.call_flow import end_body, start
from tests.helpers import assert_error
from tests.whatsapp import permission_reply, whatsapp_number

EVENTS = "/internal/v1/whatsapp/events"
USER = "+6281234500009"


@pytest.fixture
def number(tenant, agent_id):
    return whatsapp_number(tenant, agent_id=agent_id)


def forward(client, runtime_headers, *values):
    return client.post(EVENTS, json={"values": list(values)}, headers=runtime_headers)


def stored():
    row = CallPermission.get(user_number=USER)
    return row.status, row.can_call, row.expires_at


def test_a_temporary_grant_is_stored_with_its_expiry(client, runtime_headers, number):
    reply = permission_reply(
        number.whatsapp_phone_number_id, USER, expiration_timestamp=1_800_000_000
    )
    response = forward(client, runtime_headers, reply)
    assert response.status_code == 202
    assert response.json == {"accepted": 1}
    status, can_call, expires_at = stored()
    assert (status, can_call, expires_at.isoformat()) == ("temporary", True, "2027-01-15T08:00:00")


def test_a_permanent_grant_then_a_rejection(client, runtime_headers, number):
    meta_id = number.whatsapp_phone_number_id
    forward(client, runtime_headers, permission_reply(meta_id, USER, is_permanent=True))
    assert stored() == ("permanent", True, None)
    forward(client, runtime_headers, permission_reply(meta_id, USER, "reject"))
    assert stored() == ("no_permission", False, None)


def test_other_messages_and_unknown_numbers_are_ignored(client, runtime_headers, number):
    text = permission_reply(number.whatsapp_phone_number_id, USER)
    text["messages"][0] = {"from": USER[1:], "type": "text", "text": {"body": "Halo"}}
    statuses = {
        "messaging_product": "whatsapp",
        "metadata": {"phone_number_id": number.whatsapp_phone_number_id},
        "statuses": [{"id": "wamid.x", "status": "read"}],
    }
    unknown = permission_reply("999999", USER)
    odd = permission_reply(number.whatsapp_phone_number_id, USER, response="maybe")
    bad_sender = permission_reply(number.whatsapp_phone_number_id, "not-a-number")
    other_digits = permission_reply(number.whatsapp_phone_number_id, "٦٢٨١٢٣٤٥٦٧٨")
    response = forward(
        client, runtime_headers, text, statuses, unknown, odd, bad_sender, other_digits, {}
    )
    assert response.status_code == 202
    assert response.json == {"accepted": 0}
    assert CallPermission.select().count() == 0


@pytest.mark.parametrize(
    "body",
    [
        {"values": []},
        {"values": [{}] * 101},
        {"values": [{"padding": "x" * (256 * 1024)}]},
        {"values": ["text"]},
        {},
    ],
)
def test_bodies_out_of_bounds_are_422(client, runtime_headers, body):
    response = client.post(EVENTS, json=body, headers=runtime_headers)
    error = assert_error(response, 422, "validation_error")
    assert list(error["details"]) == ["values"]


def test_the_events_need_the_runtime_token(client, headers):
    assert_error(client.post(EVENTS, json={"values": [{}]}, headers=headers), 401, "unauthorized")


@pytest.mark.parametrize("reason", ["declined", "no_call_permission"])
def test_whatsapps_hangup_reasons_are_accepted(client, runtime_headers, number, reason):
    from app.services import billing
    from tests.helpers import ACTOR

    billing.grant(actor=ACTOR, tenant=number.tenant, minutes=10)
    started = start(client, runtime_headers, number.display_number)
    assert started.status_code == 201, started.get_data(as_text=True)
    body = end_body(status="failed", hangupReason=reason, durationSeconds=3, talkTimeSeconds=0)
    response = client.post(
        f"/internal/v1/calls/{started.json['id']}/ended", json=body, headers=runtime_headers
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.json["hangupReason"] == reason
