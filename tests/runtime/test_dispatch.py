"""Dispatch: a runtime claims queued outbound calls, each admitted as an inbound start is;
calls wait while their tenant is at its limit, fail without credit, and no call is handed to
two runtimes claiming at once."""

import pytest

from app.models import Call, Event, Tenant
from app.services import phone_numbers as number_service
from app.services import tenants as tenant_service
from app.services.audit import Actor
from app.services.calls import outbound as outbound_calls
from app.services.whatsapp import permissions
from tests.call_flow import answer, end
from tests.helpers import ACTOR, assert_error
from tests.runtime.test_concurrency import race
from tests.whatsapp import whatsapp_number

DISPATCH = "/internal/v1/dispatch"


def queue(tenant, count=1, **fields):
    """Queue count outbound calls from the tenant's number; their ids, oldest first."""
    (number,) = number_service.list_numbers(tenant=tenant, channel="phone")
    return [
        outbound_calls.place_call(
            tenant=tenant,
            actor=Actor.cli(),
            phone_number_id=number.id,
            to=f"+62813000{index:05d}",
            **fields,
        ).id
        for index in range(count)
    ]


def dispatch(client, runtime_headers, max_calls=1, channel=None):
    """The calls claimed (only of channel, when named), each as {"call": …, "session": …,
    "channel": …, "whatsappPhoneNumberId": …}, read as the call's fields with the rest beside
    them."""
    body = {"max": max_calls, **({"channel": channel} if channel else {})}
    response = client.post(DISPATCH, json=body, headers=runtime_headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    claimed = response.json["calls"]
    route = {"channel", "whatsappPhoneNumberId"}
    assert all(set(each) == {"call", "session", *route} for each in claimed)
    return [
        {**each["call"], "session": each["session"], "route": {k: each[k] for k in route}}
        for each in claimed
    ]


def set_limit(tenant, calls):
    tenant_service.set_plan(actor=ACTOR, tenant=tenant, plan="business", concurrent_calls=calls)


def test_nothing_queued_hands_out_nothing(client, runtime_headers, did):
    assert dispatch(client, runtime_headers, 5) == []


def test_a_claim_admits_the_oldest_calls_as_a_start_does(
    client, headers, runtime_headers, tenant, did, agent_id
):
    client.patch(
        f"/api/v1/agents/{agent_id}",
        json={"greetingText": "Halo {{name}}!", "maxCallDurationMinutes": 7},
        headers=headers,
    )
    first, second, third = queue(tenant, 3, variables={"name": "Budi"})
    claimed = dispatch(client, runtime_headers, 2)
    assert [each["id"] for each in claimed] == [first, second]
    call = claimed[0]
    assert (call["status"], call["direction"], call["calleeNumber"]) == (
        "ringing",
        "outbound",
        "+6281300000000",
    )
    assert call["route"] == {"channel": "phone", "whatsappPhoneNumberId": None}
    session = call["session"]
    assert (session["agentId"], session["greetingText"]) == (agent_id, "Halo Budi!")
    assert session["maxCallDurationSeconds"] == 7 * 60
    refreshed = Tenant.get_by_id(tenant.id)
    assert (refreshed.active_calls, refreshed.reserved_minutes) == (2, 14)
    started = Event.select().where(Event.type == "call.started").order_by(Event.seq)
    assert [event.data for event in started] == [
        {
            "callId": call_id,
            "phoneNumberId": call["phoneNumberId"],
            "callerNumber": callee,
            "did": did,
        }
        for call_id, callee in ((first, "+6281300000000"), (second, "+6281300000001"))
    ]
    assert Call.get_by_id(third).status == "queued"
    assert [each["id"] for each in dispatch(client, runtime_headers, 5)] == [third]


def test_a_call_from_a_whatsapp_number_names_metas_id_of_it(
    client, runtime_headers, tenant, did, agent_id
):
    number = whatsapp_number(tenant, agent_id=agent_id, meta_id="1100042")
    user = "+6281300000042"
    permissions.record(
        number.id,
        permissions.Permission(
            to=user, status="permanent", expires_at=None, can_call=True, can_request=False
        ),
    )
    call = outbound_calls.place_call(
        tenant=tenant, actor=Actor.cli(), phone_number_id=number.id, to=user
    )
    (claimed,) = dispatch(client, runtime_headers)
    assert (claimed["id"], claimed["callerNumber"]) == (call.id, number.display_number)
    assert claimed["route"] == {"channel": "whatsapp", "whatsappPhoneNumberId": "1100042"}


def queue_whatsapp(tenant, agent_id, count=1):
    """Queue count calls from a WhatsApp number of the tenant (each user has granted the
    number permission to call); their ids, oldest first."""
    number = whatsapp_number(tenant, agent_id=agent_id, meta_id="1100042")
    ids = []
    for index in range(count):
        user = f"+62813100{index:05d}"
        permissions.record(
            number.id,
            permissions.Permission(
                to=user, status="permanent", expires_at=None, can_call=True, can_request=False
            ),
        )
        call = outbound_calls.place_call(
            tenant=tenant, actor=Actor.cli(), phone_number_id=number.id, to=user
        )
        ids.append(call.id)
    return ids


def test_a_claim_naming_a_channel_leaves_the_other_channels_calls_queued(
    client, runtime_headers, tenant, did, agent_id
):
    # The phone calls are older: a claim of every channel would hand them out first.
    phone = queue(tenant, 2)
    whatsapp = queue_whatsapp(tenant, agent_id, 2)
    claimed = dispatch(client, runtime_headers, 5, channel="whatsapp")
    assert [each["id"] for each in claimed] == whatsapp
    assert {each["route"]["channel"] for each in claimed} == {"whatsapp"}
    assert [Call.get_by_id(call_id).status for call_id in phone] == ["queued"] * 2
    assert dispatch(client, runtime_headers, 5, channel="whatsapp") == []
    claimed = dispatch(client, runtime_headers, 5, channel="phone")
    assert [each["id"] for each in claimed] == phone
    assert {each["route"]["channel"] for each in claimed} == {"phone"}


def test_a_phone_claim_leaves_whatsapp_calls_queued_and_a_claim_of_every_channel_takes_them(
    client, runtime_headers, tenant, did, agent_id
):
    whatsapp = queue_whatsapp(tenant, agent_id)
    phone = queue(tenant)
    assert [each["id"] for each in dispatch(client, runtime_headers, 5, channel="phone")] == phone
    assert Call.get_by_id(whatsapp[0]).status == "queued"
    assert [each["id"] for each in dispatch(client, runtime_headers, 5)] == whatsapp


def test_a_claimed_call_is_reported_as_any_call_and_frees_its_slot(
    client, runtime_headers, tenant, did
):
    (call_id,) = queue(tenant)
    dispatch(client, runtime_headers)
    assert answer(client, runtime_headers, call_id).status_code == 200
    assert end(client, runtime_headers, call_id, talkTimeSeconds=61).json["billedMinutes"] == 2
    refreshed = Tenant.get_by_id(tenant.id)
    assert (refreshed.active_calls, refreshed.reserved_minutes, refreshed.balance_minutes) == (
        0,
        0,
        98,
    )


def test_an_unanswered_call_is_reported_failed_with_its_reason(
    client, runtime_headers, tenant, did
):
    (call_id,) = queue(tenant)
    dispatch(client, runtime_headers)
    response = end(
        client,
        runtime_headers,
        call_id,
        status="failed",
        hangupReason="busy",
        hangupInitiator="callee",
        durationSeconds=20,
        talkTimeSeconds=0,
        aiCostIdr=0,
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    assert (response.json["status"], response.json["hangupReason"]) == ("failed", "busy")
    assert Tenant.get_by_id(tenant.id).active_calls == 0


def test_calls_stay_queued_while_the_tenant_is_at_its_limit(client, runtime_headers, tenant, did):
    set_limit(tenant, 2)
    ids = queue(tenant, 4)
    assert [each["id"] for each in dispatch(client, runtime_headers, 10)] == ids[:2]
    assert dispatch(client, runtime_headers, 10) == []
    assert [Call.get_by_id(call_id).status for call_id in ids[2:]] == ["queued", "queued"]
    answer(client, runtime_headers, ids[0])
    end(client, runtime_headers, ids[0])
    assert [each["id"] for each in dispatch(client, runtime_headers, 10)] == [ids[2]]


def test_a_tenant_at_its_limit_does_not_hold_up_another(
    client, runtime_headers, tenant, did, other_tenant
):
    from app.services import agents as agent_service
    from app.services import billing

    set_limit(tenant, 1)
    number = number_service.add_number(
        actor=ACTOR, tenant=other_tenant, display_number="+6221555020"
    )
    agent = agent_service.create_agent(
        actor=ACTOR, tenant=other_tenant, name="Other", system_prompt="x"
    )
    number_service.assign_agent(
        actor=ACTOR, tenant=other_tenant, number_id=number.id, agent_id=agent.id
    )
    billing.grant(actor=ACTOR, tenant=other_tenant, minutes=10)
    mine = queue(tenant, 3)
    theirs = queue(other_tenant, 1)
    claimed = [each["id"] for each in dispatch(client, runtime_headers, 10)]
    assert claimed == [mine[0], theirs[0]]


def test_a_call_without_credit_fails_no_credits_and_is_not_handed_out(
    client, runtime_headers, tenant, did
):
    (call_id,) = queue(tenant)
    Tenant.update(balance_minutes=0).where(Tenant.id == tenant.id).execute()
    assert dispatch(client, runtime_headers) == []
    call = Call.get_by_id(call_id)
    assert (call.status, call.hangup_reason, call.hangup_initiator) == (
        "failed",
        "no_credits",
        "system",
    )
    types = [event.type for event in Event.select().order_by(Event.seq)]
    assert types == ["call.started", "call.ended"]
    assert Tenant.get_by_id(tenant.id).active_calls == 0


def test_a_call_whose_agent_was_deleted_fails_no_agent(
    client, headers, runtime_headers, tenant, did, agent_id
):
    (call_id,) = queue(tenant)
    client.delete(f"/api/v1/agents/{agent_id}", headers=headers)
    assert dispatch(client, runtime_headers) == []
    assert Call.get_by_id(call_id).hangup_reason == "no_agent"


def test_a_claimed_call_can_no_longer_be_canceled(client, headers, runtime_headers, tenant, did):
    (call_id,) = queue(tenant)
    dispatch(client, runtime_headers)
    response = client.post(f"/api/v1/calls/{call_id}/cancel", headers=headers)
    assert_error(response, 409, "illegal_transition")


def test_a_canceled_call_is_never_handed_out(client, headers, runtime_headers, tenant, did):
    (call_id,) = queue(tenant)
    client.post(f"/api/v1/calls/{call_id}/cancel", headers=headers)
    assert dispatch(client, runtime_headers) == []


def test_a_queued_call_cannot_be_answered_or_ended(client, runtime_headers, tenant, did):
    (call_id,) = queue(tenant)
    assert_error(answer(client, runtime_headers, call_id), 409, "illegal_transition")
    assert_error(end(client, runtime_headers, call_id), 409, "illegal_transition")


@pytest.mark.parametrize("body", [{"max": 0}, {"max": 51}, {"max": "2"}, {"calls": 1}])
def test_a_bad_claim_is_422(client, runtime_headers, body):
    assert_error(client.post(DISPATCH, json=body, headers=runtime_headers), 422, "validation_error")


@pytest.mark.parametrize("channel", ["sms", "WhatsApp", "", 1])
def test_a_claim_of_an_unknown_channel_is_422_naming_it(
    client, runtime_headers, tenant, did, channel
):
    queue(tenant)
    response = client.post(DISPATCH, json={"max": 1, "channel": channel}, headers=runtime_headers)
    error = assert_error(response, 422, "validation_error")
    assert "channel" in str(error["details"]), error
    assert Call.select().where(Call.status == "queued").count() == 1


def test_dispatch_needs_the_runtime_token(client, headers):
    assert_error(client.post(DISPATCH, json={"max": 1}, headers=headers), 401, "unauthorized")


@pytest.mark.slow
def test_runtimes_claiming_at_once_never_get_the_same_call(app_config, tenant, did):
    from app.services import billing

    set_limit(tenant, 1000)
    billing.grant(actor=ACTOR, tenant=tenant, minutes=1000)  # every call may hold its 10 minutes
    ids = queue(tenant, 30)
    answers = race(app_config, DISPATCH, {"max": 5}, processes=3, threads=4)
    assert all(status == 200 for status, _ in answers)
    claimed = [each["call"]["id"] for _, body in answers for each in body["calls"]]
    assert len(claimed) == len(set(claimed)) > 0
    assert set(claimed) <= set(ids)
    assert Call.select().where(Call.status == "ringing").count() == len(claimed)
    assert Tenant.get_by_id(tenant.id).active_calls == len(claimed)
    assert Event.select().where(Event.type == "call.started").count() == len(claimed)
    assert Call.select().where(Call.status == "queued").count() == 30 - len(claimed)


@pytest.mark.slow
def test_runtimes_claiming_at_once_admit_no_more_than_the_limit(app_config, tenant, did):
    set_limit(tenant, 5)
    queue(tenant, 20)
    answers = race(app_config, DISPATCH, {"max": 5}, processes=2, threads=4)
    claimed = [each["call"]["id"] for _, body in answers for each in body["calls"]]
    assert len(claimed) == len(set(claimed)) <= 5
    assert Tenant.get_by_id(tenant.id).active_calls == len(claimed)
    assert Call.select().where(Call.status == "queued").count() == 20 - len(claimed)


def test_a_queued_call_is_answered_with_its_numbers_pinned_version(
    client, headers, runtime_headers, tenant, did, agent_id
):
    """Dispatch chooses the version as a start does: a call queued from a number pinned to
    version 1 talks with version 1's prompt and functions after the agent moved on; a call
    naming the agent from an unpinned line gets the latest."""
    (number,) = number_service.list_numbers(tenant=tenant, channel="phone")
    pinned = client.post(
        f"/api/v1/phone-numbers/{number.id}/assign-agent",
        json={"agentId": agent_id, "agentVersion": 1},
        headers=headers,
    )
    assert pinned.status_code == 200, pinned.get_data(as_text=True)
    (queued,) = queue(tenant)
    function = {
        "name": "lookup_order",
        "description": "Look up an order.",
        "endpoint": "http://127.0.0.1:9/orders",
        "parameters": {"type": "object", "properties": {}},
        "secret": "s" * 32,
    }
    created = client.post(f"/api/v1/agents/{agent_id}/functions", json=function, headers=headers)
    assert created.status_code == 201, created.get_data(as_text=True)
    changed = client.patch(
        f"/api/v1/agents/{agent_id}", json={"systemPrompt": "Sell more."}, headers=headers
    )
    assert changed.json["version"] == 3
    (call,) = dispatch(client, runtime_headers)
    assert call["id"] == queued
    assert call["agentVersion"] == call["session"]["agentVersion"] == 1
    assert (call["session"]["systemPrompt"], call["session"]["functions"]) == ("Be helpful.", [])
    assert Call.get_by_id(queued).agent_version == 1

    client.post(
        f"/api/v1/phone-numbers/{number.id}/assign-agent",
        json={"agentId": agent_id},
        headers=headers,
    )
    (latest,) = queue(tenant)
    (call,) = dispatch(client, runtime_headers)
    assert call["id"] == latest
    assert call["agentVersion"] == call["session"]["agentVersion"] == 3
    assert call["session"]["systemPrompt"] == "Sell more."
    assert [each["name"] for each in call["session"]["functions"]] == ["lookup_order"]
