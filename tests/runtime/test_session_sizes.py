"""Sizes that multiply: variables may not fill a call's session past 256 KiB (placing,
starting or a campaign's contact: 422 naming variables, nothing recorded), and a dispatch
answer holds at most 8 MiB of sessions, the rest staying queued for the next claim."""

import json

import pytest

from app.models import Call, Campaign, Tenant
from app.services import agents as agent_service
from app.services import billing
from app.services import phone_numbers as number_service
from app.services import tenants as tenant_service
from app.services.calls import admission as call_admission
from app.services.calls.constants import MAX_DISPATCH_BYTES, MAX_SESSION_BYTES
from tests.call_flow import start
from tests.campaigns import CAMPAIGNS
from tests.helpers import ACTOR, assert_error
from tests.runtime.test_dispatch import DISPATCH, queue

# What the review sent: a prompt of 4,000 placeholders and a 2 KB value, 8.8 MB filled.
REVIEW_PROMPT = "{{a}}" * 4000
REVIEW_VARIABLES = {"a": "x" * 2000}
CALLEE = "+6281311112222"


@pytest.fixture
def number_id(did, tenant):
    (number,) = number_service.list_numbers(tenant=tenant)
    return number.id


def use_prompt(tenant, agent_id, prompt, **fields):
    agent_service.update_agent(
        actor=ACTOR, tenant=tenant, agent_id=agent_id, system_prompt=prompt, **fields
    )


def test_the_size_is_counted_without_filling():
    text = "Hi {{a}}, {{b}} and {{a}}: é"
    variables = {"a": "Bü", "c": "unused"}
    missing: list[str] = []
    filled = call_admission.fill_placeholders(text, variables, missing)
    assert call_admission.filled_bytes(text, variables) == len(filled.encode())
    assert call_admission.session_bytes(REVIEW_PROMPT, "", REVIEW_VARIABLES) == 8_000_000


def test_the_reviews_variables_are_refused_when_placing(
    client, headers, tenant, agent_id, number_id
):
    use_prompt(tenant, agent_id, REVIEW_PROMPT)
    body = {"phoneNumberId": number_id, "to": CALLEE, "variables": REVIEW_VARIABLES}
    error = assert_error(
        client.post("/api/v1/calls", json=body, headers=headers), 422, "validation_error"
    )
    assert list(error["details"]) == ["variables"]
    assert Call.select().count() == 0
    assert Tenant.get_by_id(tenant.id).calls_count == 0
    # Just under the size is placed.
    fitting = {"a": "x" * (MAX_SESSION_BYTES // 4000)}
    response = client.post("/api/v1/calls", json={**body, "variables": fitting}, headers=headers)
    assert response.status_code == 201, response.get_data(as_text=True)


def test_the_reviews_variables_are_refused_at_an_inbound_start(
    client, runtime_headers, tenant, agent_id, did
):
    use_prompt(tenant, agent_id, REVIEW_PROMPT)
    response = start(client, runtime_headers, did, variables=REVIEW_VARIABLES)
    error = assert_error(response, 422, "validation_error")
    assert list(error["details"]) == ["variables"]
    assert Call.select().count() == 0
    assert Tenant.get_by_id(tenant.id).active_calls == 0


def test_a_long_greeting_counts_too(client, headers, tenant, agent_id, number_id):
    use_prompt(tenant, agent_id, "{{a}}" * 3000, greeting_text="{{a}}" * 400)
    body = {"phoneNumberId": number_id, "to": CALLEE, "variables": {"a": "y" * 80}}
    # 3,400 × 80 = 272,000 bytes: over, though the prompt alone (240,000) is not.
    error = assert_error(
        client.post("/api/v1/calls", json=body, headers=headers), 422, "validation_error"
    )
    assert "variables" in error["details"]


def test_a_campaign_contact_whose_variables_pass_it_is_refused(
    client, headers, tenant, agent_id, number_id
):
    use_prompt(tenant, agent_id, REVIEW_PROMPT)
    body = {
        "name": "x",
        "phoneNumberId": number_id,
        "contacts": [
            {"to": CALLEE, "variables": {"a": "ok"}},
            {"to": "+6281311113333", "variables": REVIEW_VARIABLES},
        ],
    }
    error = assert_error(
        client.post(CAMPAIGNS, json=body, headers=headers), 422, "validation_error"
    )
    assert list(error["details"]) == ["contacts"]
    assert list(error["details"]["contacts"]) == ["1"]
    assert list(error["details"]["contacts"]["1"]) == ["variables"]
    assert Campaign.select().count() == 0


def answer_size(response) -> int:
    return sum(
        len(json.dumps(each["session"], separators=(",", ":")).encode())
        for each in response.json["calls"]
    )


def test_a_dispatch_holds_at_most_8_mib_of_sessions_and_leaves_the_rest_queued(
    client, headers, runtime_headers, tenant, agent_id, did, other_tenant
):
    # 100 placeholders of a 2,000-byte value: about 200 KB a session, allowed.
    use_prompt(tenant, agent_id, "{{a}} " * 100, max_call_duration_minutes=1)
    tenant_service.set_plan(actor=ACTOR, tenant=tenant, plan="business", concurrent_calls=100)
    billing.grant(actor=ACTOR, tenant=tenant, minutes=1000)
    large = queue(tenant, 45, variables={"a": "x" * 2000})
    # Another tenant's small calls, queued after them.
    other_agent = agent_service.create_agent(
        actor=ACTOR, tenant=other_tenant, name="Sales", system_prompt="Hello {{a}}."
    )
    number = number_service.add_number(
        actor=ACTOR, tenant=other_tenant, display_number="+6221555099", label="Sales"
    )
    number_service.assign_agent(
        actor=ACTOR, tenant=other_tenant, number_id=number.id, agent_id=other_agent.id
    )
    billing.grant(actor=ACTOR, tenant=other_tenant, minutes=100)
    small = queue(other_tenant, 3, variables={"a": "Budi"})

    first = client.post(DISPATCH, json={"max": 50}, headers=runtime_headers)
    assert first.status_code == 200, first.get_data(as_text=True)
    claimed = [each["call"]["id"] for each in first.json["calls"]]
    assert answer_size(first) <= MAX_DISPATCH_BYTES
    assert len(first.get_data()) < MAX_DISPATCH_BYTES + 64 * 1024
    taken = [call_id for call_id in large if call_id in claimed]
    assert 30 < len(taken) < 45
    assert taken == large[: len(taken)]  # oldest first
    assert set(small) <= set(claimed)
    left = large[len(taken) :]
    statuses = {call.id: call.status for call in Call.select()}
    assert {statuses[call_id] for call_id in left} == {"queued"}

    second = client.post(DISPATCH, json={"max": 50}, headers=runtime_headers)
    assert [each["call"]["id"] for each in second.json["calls"]] == left
    assert Call.select().where(Call.status == "queued").count() == 0


def test_a_queued_call_whose_agent_grew_past_the_size_fails_at_its_claim(
    client, headers, runtime_headers, tenant, agent_id, did
):
    """Checked when placed, and again when claimed: the agent's prompt may grow between."""
    (too_large, fits) = queue(tenant, 2, variables={"a": "x" * 2000})
    Call.update(variables={"a": "y"}).where(Call.id == fits).execute()
    use_prompt(tenant, agent_id, "{{a}}" * 200)  # 400 KB with the first call's value
    claimed = client.post(DISPATCH, json={"max": 5}, headers=runtime_headers)
    assert [each["call"]["id"] for each in claimed.json["calls"]] == [fits]
    call = Call.get_by_id(too_large)
    assert (call.status, call.hangup_reason, call.hangup_initiator) == (
        "failed",
        "session_too_large",
        "system",
    )
    assert (call.reserved_minutes, Tenant.get_by_id(tenant.id).active_calls) == (0, 1)
    ended = client.get(f"/api/v1/calls/{too_large}", headers=headers).json
    assert ended["hangupReason"] == "session_too_large"
