"""Concurrent-call limits: a call takes one of its tenant's slots from admission until it
ends or its hold lapses; a start over the limit is recorded failed and answered 409."""

from datetime import timedelta

import pytest

from app.errors import ValidationFailed
from app.models import Call, Event, Tenant
from app.services import billing
from app.services import tenants as tenant_service
from app.services.calls import lifecycle as call_lifecycle
from app.util import utcnow
from tests.call_flow import answer, end, start
from tests.helpers import ACTOR, assert_error


def active_calls(tenant):
    return Tenant.get_by_id(tenant.id).active_calls


def limit_to(tenant, calls):
    tenant_service.set_plan(actor=ACTOR, tenant=tenant, plan="business", concurrent_calls=calls)


@pytest.mark.parametrize(
    ("plan", "custom", "limit"),
    [("starter", None, 5), ("business", None, 20), ("enterprise", 150, 150), ("starter", 8, 8)],
)
def test_each_plan_has_its_limit(app, plan, custom, limit):
    tenant = tenant_service.create_tenant(
        actor=ACTOR,
        name=f"t-{plan}-{custom}",
        plan=plan,
        rate_limit=1000 if plan == "enterprise" else None,
        concurrent_calls=custom,
    )
    assert tenant_service.concurrent_call_limit_of(tenant) == limit


def test_the_enterprise_plan_needs_its_concurrent_call_limit(app):
    with pytest.raises(ValidationFailed, match="--concurrent-calls"):
        tenant_service.create_tenant(actor=ACTOR, name="big", plan="enterprise", rate_limit=1000)


def test_a_start_over_the_limit_is_recorded_failed_and_409(client, runtime_headers, tenant, did):
    limit_to(tenant, 2)
    admitted = [start(client, runtime_headers, did) for _ in range(2)]
    assert [response.status_code for response in admitted] == [201, 201]
    refused = start(client, runtime_headers, did)
    error = assert_error(refused, 409, "concurrency_limit")
    call = Call.get_by_id(error["details"]["callId"])
    assert (call.status, call.hangup_reason, call.hangup_initiator) == (
        "failed",
        "concurrency_limit",
        "system",
    )
    assert (call.reserved_minutes, call.billed_minutes, call.reservation_expires_at) == (0, 0, None)
    ended = Event.select().where(Event.type == "call.ended").get()
    assert (ended.data["callId"], ended.data["hangupReason"]) == (call.id, "concurrency_limit")
    refreshed = Tenant.get_by_id(tenant.id)
    assert (refreshed.active_calls, refreshed.reserved_minutes, refreshed.calls_count) == (2, 20, 3)


def test_a_refused_start_takes_no_slot(client, runtime_headers, tenant, did):
    billing.adjust(tenant=tenant, actor=ACTOR, minutes=-100)
    assert_error(start(client, runtime_headers, did), 409, "no_credits")
    assert active_calls(tenant) == 0


@pytest.mark.parametrize(
    ("status", "talk"), [("ended", 61), ("failed", 0), ("dropped", 0), ("dropped", 30)]
)
def test_every_end_frees_the_slot_once(client, runtime_headers, tenant, did, status, talk):
    limit_to(tenant, 1)
    call_id = start(client, runtime_headers, did).json["id"]
    assert active_calls(tenant) == 1
    assert_error(start(client, runtime_headers, did), 409, "concurrency_limit")
    answer(client, runtime_headers, call_id)
    fields = {"status": status, "talkTimeSeconds": talk}
    assert end(client, runtime_headers, call_id, **fields).status_code == 200
    assert active_calls(tenant) == 0
    # A repeat frees nothing more.
    assert end(client, runtime_headers, call_id, **fields).status_code == 200
    assert active_calls(tenant) == 0
    assert start(client, runtime_headers, did).status_code == 201
    assert active_calls(tenant) == 1


def lapse(call_id):
    Call.update(reservation_expires_at=utcnow() - timedelta(seconds=1)).where(
        Call.id == call_id
    ).execute()


def test_a_lapsed_hold_frees_the_slot_and_its_late_end_frees_nothing(
    client, runtime_headers, tenant, did
):
    limit_to(tenant, 2)
    lost = start(client, runtime_headers, did).json["id"]
    kept = start(client, runtime_headers, did).json["id"]
    lapse(lost)
    assert call_lifecycle.release_lapsed_holds() == 1
    assert active_calls(tenant) == 1
    assert call_lifecycle.release_lapsed_holds() == 0
    assert active_calls(tenant) == 1
    again = start(client, runtime_headers, did)
    assert again.status_code == 201
    assert active_calls(tenant) == 2
    answer_late = client.post(
        f"/internal/v1/calls/{lost}/answered", json={}, headers=runtime_headers
    )
    assert answer_late.status_code == 409
    assert_error(end(client, runtime_headers, lost), 409, "call_not_active")
    assert active_calls(tenant) == 2
    for call_id in (kept, again.json["id"]):
        answer(client, runtime_headers, call_id)
        end(client, runtime_headers, call_id)
    refreshed = Tenant.get_by_id(tenant.id)
    assert (refreshed.active_calls, refreshed.reserved_minutes) == (0, 0)


def test_lapsed_holds_of_several_calls_free_a_slot_each(client, runtime_headers, tenant, did):
    ids = [start(client, runtime_headers, did).json["id"] for _ in range(3)]
    for call_id in ids[:2]:
        lapse(call_id)
    assert call_lifecycle.release_lapsed_holds() == 2
    refreshed = Tenant.get_by_id(tenant.id)
    assert (refreshed.active_calls, refreshed.reserved_minutes) == (1, 10)


def test_a_lower_limit_lets_calls_in_progress_go_on(client, runtime_headers, tenant, did):
    ids = [start(client, runtime_headers, did).json["id"] for _ in range(3)]
    limit_to(tenant, 2)
    assert_error(start(client, runtime_headers, did), 409, "concurrency_limit")
    answer(client, runtime_headers, ids[0])
    assert end(client, runtime_headers, ids[0]).status_code == 200
    assert_error(start(client, runtime_headers, did), 409, "concurrency_limit")
    end(client, runtime_headers, ids[1], status="dropped", talkTimeSeconds=0)
    assert start(client, runtime_headers, did).status_code == 201


def test_a_repeated_provider_call_id_of_a_refused_call_is_409_again(
    client, runtime_headers, tenant, did
):
    limit_to(tenant, 1)
    first = start(client, runtime_headers, did).json["id"]
    response = start(client, runtime_headers, did, providerCallId="p")
    refused = assert_error(response, 409, "concurrency_limit")
    answer(client, runtime_headers, first)
    end(client, runtime_headers, first)
    response = start(client, runtime_headers, did, providerCallId="p")
    again = assert_error(response, 409, "concurrency_limit")
    assert again["details"] == refused["details"]
    assert active_calls(tenant) == 0


def test_the_limit_is_per_tenant(client, runtime_headers, tenant, other_tenant, did):
    from app.services import agents as agent_service
    from app.services import phone_numbers as number_service

    limit_to(tenant, 1)
    number = number_service.add_number(
        actor=ACTOR, tenant=other_tenant, display_number="+6221555777"
    )
    agent = agent_service.create_agent(
        actor=ACTOR, tenant=other_tenant, name="B", system_prompt="x"
    )
    number_service.assign_agent(
        actor=ACTOR, tenant=other_tenant, number_id=number.id, agent_id=agent.id
    )
    billing.grant(actor=ACTOR, tenant=other_tenant, minutes=50)
    assert start(client, runtime_headers, did).status_code == 201
    assert start(client, runtime_headers, "+6221555777").status_code == 201
    assert start(client, runtime_headers, "+6221555777").status_code == 201
    assert (active_calls(tenant), active_calls(other_tenant)) == (1, 2)


def test_the_runtime_documents_concurrency_limit(client):
    document = client.get("/api/v1/openapi.json").json
    refused = document["paths"]["/internal/v1/calls"]["post"]["responses"]["409"]
    assert "concurrency_limit" in refused["description"]
