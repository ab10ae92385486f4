"""Runtime API: auth, the call lifecycle, its state machine, idempotency and its events."""

import re
from datetime import timedelta

import pytest

from app import create_app
from app.models import Agent, Call, CreditTransaction, Delivery, Event, Tenant, Webhook
from app.services import agents as agent_service
from app.services import billing
from app.services import functions as function_service
from app.services import phone_numbers as number_service
from app.services.calls import lifecycle as call_lifecycle
from app.services.calls.constants import DURATION_ALLOWANCE_SECONDS
from app.util import new_id, utcnow
from tests.call_flow import CALLER, RUNTIME, answer, backdate, end, end_body, start, whole_call
from tests.helpers import ACTOR, assert_error

SESSION_FIELDS = {
    "agentId",
    "agentVersion",
    "systemPrompt",
    "voiceId",
    "greetingText",
    "language",
    "escalationNumber",
    "toolsEnabled",
    "functions",
    "maxCallDurationSeconds",
    "missingVariables",
}


def events_of(type_):
    return [event.data for event in Event.select().where(Event.type == type_)]


def balance_of(tenant):
    return Tenant.get_by_id(tenant.id).balance_minutes


# Authentication


def test_missing_token_is_401(client, did):
    assert_error(start(client, {}, did), 401, "unauthorized")


def test_wrong_token_is_401(client, did):
    response = start(client, {"Authorization": "Bearer nope"}, did)
    assert_error(response, 401, "unauthorized")
    response = client.post(f"{RUNTIME}/call_x/answered", headers={"Authorization": "Basic x"})
    assert_error(response, 401, "unauthorized")


def test_tenant_api_key_is_not_a_runtime_token(client, headers, did):
    assert_error(start(client, headers, did), 401, "unauthorized")


def test_runtime_api_without_configured_token_is_503(app_config, did):
    closed = create_app({**app_config, "RUNTIME_TOKEN": None})
    response = closed.test_client().post(
        RUNTIME, json={"did": did, "callerNumber": CALLER}, headers={"Authorization": "Bearer "}
    )
    error = assert_error(response, 503, "runtime_disabled")
    assert "RUNTIME_TOKEN" in error["message"]


# Starting a call


def test_start_call_records_ringing_call_and_returns_session(client, runtime_headers, did):
    response = start(client, runtime_headers, did, providerCallId="prov-1")
    assert response.status_code == 201
    body = response.json
    assert body["id"].startswith("call_") and len(body["id"]) == 25
    assert body["status"] == "ringing"
    assert (body["callerNumber"], body["calleeNumber"], body["direction"]) == (
        CALLER,
        did,
        "inbound",
    )
    assert body["startedAt"].endswith("Z") and body["endedAt"] is None
    session = body["session"]
    assert set(session) == SESSION_FIELDS
    agent = Agent.get_by_id(session["agentId"])
    assert session["systemPrompt"] == agent.system_prompt == "Be helpful."
    assert (session["voiceId"], session["language"], session["greetingText"]) == ("Puck", "id", "")
    assert session["toolsEnabled"] == [] and session["functions"] == []
    assert session["escalationNumber"] is None and session["missingVariables"] == []
    assert session["maxCallDurationSeconds"] == 600  # 10-minute agent limit, 100 minutes left
    assert Call.get_by_id(body["id"]).provider_call_id == "prov-1"


def test_session_time_limit_is_the_balance_when_lower(client, runtime_headers, tenant, did):
    billing.adjust(tenant=tenant, actor=ACTOR, minutes=-97)
    session = start(client, runtime_headers, did).json["session"]
    assert session["maxCallDurationSeconds"] == 180


def credits(client, headers):
    body = client.get("/api/v1/credits", headers=headers).json
    return body["balanceMinutes"], body["reservedMinutes"], body["availableMinutes"]


def test_an_open_call_holds_its_allowance_until_it_ends(
    client, headers, runtime_headers, tenant, did
):
    billing.adjust(tenant=tenant, actor=ACTOR, minutes=-85)  # 15 minutes left
    first = start(client, runtime_headers, did).json
    assert first["session"]["maxCallDurationSeconds"] == 600
    assert credits(client, headers) == (15, 10, 5)
    # The next call may hold only what the first leaves available.
    second = start(client, runtime_headers, did).json
    assert second["session"]["maxCallDurationSeconds"] == 300
    assert credits(client, headers) == (15, 15, 0)
    refused = start(client, runtime_headers, did)
    assert_error(refused, 409, "no_credits")
    assert Call.get_by_id(refused.json["error"]["details"]["callId"]).reserved_minutes == 0

    # Ending releases the hold and charges what was used, in one step.
    answer(client, runtime_headers, first["id"])
    assert end(client, runtime_headers, first["id"], talkTimeSeconds=61).status_code == 200
    assert credits(client, headers) == (13, 5, 8)
    # A repeated end releases nothing more.
    assert end(client, runtime_headers, first["id"], talkTimeSeconds=61).status_code == 200
    assert credits(client, headers) == (13, 5, 8)
    # A call ended without talk time releases its hold and charges nothing.
    assert end(client, runtime_headers, second["id"], talkTimeSeconds=0).status_code == 200
    assert credits(client, headers) == (13, 0, 13)


def test_a_repeated_provider_call_id_answers_with_the_same_allowance(
    client, runtime_headers, tenant, did
):
    billing.adjust(tenant=tenant, actor=ACTOR, minutes=-96)
    first = start(client, runtime_headers, did, providerCallId="prov-hold").json
    again = start(client, runtime_headers, did, providerCallId="prov-hold")
    assert again.status_code == 200
    assert again.json["session"]["maxCallDurationSeconds"] == 240
    assert first["session"] == again.json["session"]
    assert Tenant.get_by_id(tenant.id).reserved_minutes == 4


def test_talk_beyond_the_allowance_overdraws_by_at_most_the_excess(
    client, runtime_headers, tenant, did
):
    billing.adjust(tenant=tenant, actor=ACTOR, minutes=-98)
    call = start(client, runtime_headers, did).json
    assert call["session"]["maxCallDurationSeconds"] == 120
    answer(client, runtime_headers, call["id"])
    end(client, runtime_headers, call["id"], talkTimeSeconds=150)  # 30 s over: 1 minute more
    refreshed = Tenant.get_by_id(tenant.id)
    assert (refreshed.balance_minutes, refreshed.reserved_minutes) == (-1, 0)


def test_a_call_whose_hold_lapses_is_closed_as_runtime_lost_and_its_late_end_refused(
    client, headers, runtime_headers, tenant, did
):
    billing.adjust(tenant=tenant, actor=ACTOR, minutes=-80)
    lost = start(client, runtime_headers, did).json
    kept = start(client, runtime_headers, did).json
    assert credits(client, headers) == (20, 20, 0)
    answer(client, runtime_headers, lost["id"])
    # The runtime never reports the first call's end: its hold outlives the allowance by
    # the grace period, then lapses, and the call is closed, charging nothing.
    Call.update(reservation_expires_at=utcnow() - timedelta(seconds=1)).where(
        Call.id == lost["id"]
    ).execute()
    assert call_lifecycle.release_lapsed_holds() == 1
    assert call_lifecycle.release_lapsed_holds() == 0
    assert credits(client, headers) == (20, 10, 10)
    closed = Call.get_by_id(lost["id"])
    assert (closed.status, closed.hangup_reason, closed.hangup_initiator) == (
        "failed",
        "runtime_lost",
        "system",
    )
    assert closed.billed_minutes == 0 and closed.ended_at is not None
    ended = Event.get((Event.type == "call.ended") & (Event.call_id == lost["id"]))
    assert ended.data["hangupReason"] == "runtime_lost"
    # Its late end (the probe's overdraw: 10 minutes past the allowance) is refused and
    # charges nothing: the balance never goes below what the calls were allowed.
    late = end(client, runtime_headers, lost["id"], durationSeconds=1210, talkTimeSeconds=1200)
    assert_error(late, 409, "call_not_active")
    assert late.json["error"]["details"] == {"status": "failed", "hangupReason": "runtime_lost"}
    assert credits(client, headers) == (20, 10, 10)
    answer(client, runtime_headers, kept["id"])
    assert (
        end(
            client, runtime_headers, kept["id"], durationSeconds=610, talkTimeSeconds=600
        ).status_code
        == 200
    )
    assert credits(client, headers) == (10, 0, 10)


def test_a_hold_stands_for_the_allowance_and_the_grace(client, runtime_headers, did):
    call = Call.get_by_id(start(client, runtime_headers, did).json["id"])
    assert call.reserved_minutes == 10
    expected = call.started_at + timedelta(minutes=10) + billing.HOLD_GRACE
    assert call.reservation_expires_at == expected


def test_session_lists_the_agents_functions(client, runtime_headers, tenant, agent_id, did):
    parameters = {"type": "object", "properties": {}, "required": []}
    for name, timeout_ms in (("lookup_order", 5000), ("book_visit", 1500)):
        function_service.create_function(
            actor=ACTOR,
            tenant=tenant,
            agent_id=agent_id,
            name=name,
            description=f"Does {name}.",
            endpoint="http://127.0.0.1:9/x",
            parameters=parameters,
            timeout_ms=timeout_ms,
        )
    session = start(client, runtime_headers, did).json["session"]
    assert session["agentVersion"] == 3
    assert session["functions"] == [
        {
            "name": "book_visit",
            "description": "Does book_visit.",
            "parameters": parameters,
            "timeoutMs": 1500,
        },
        {
            "name": "lookup_order",
            "description": "Does lookup_order.",
            "parameters": parameters,
            "timeoutMs": 5000,
        },
    ]


def test_start_call_emits_call_started(client, runtime_headers, did):
    body = start(client, runtime_headers, did).json
    assert events_of("call.started") == [
        {
            "callId": body["id"],
            "phoneNumberId": body["phoneNumberId"],
            "callerNumber": CALLER,
            "did": did,
        }
    ]


def test_outbound_call_has_the_business_number_as_caller(client, runtime_headers, did):
    body = start(client, runtime_headers, did, direction="outbound").json
    assert (body["direction"], body["callerNumber"], body["calleeNumber"]) == (
        "outbound",
        did,
        CALLER,
    )


def test_repeated_provider_call_id_returns_the_same_call(client, runtime_headers, tenant, did):
    first = start(client, runtime_headers, did, providerCallId="prov-7")
    again = start(client, runtime_headers, did, providerCallId="prov-7")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json["id"] == first.json["id"]
    assert again.json["session"] == first.json["session"]
    assert Call.select().count() == 1
    assert Tenant.get_by_id(tenant.id).calls_count == 1
    assert len(events_of("call.started")) == 1


def test_provider_call_id_is_unique_per_tenant_only(
    client, runtime_headers, did, other_tenant, agent_id
):
    number = number_service.add_number(
        actor=ACTOR, tenant=other_tenant, display_number="+6221555777"
    )
    agent = agent_service.create_agent(
        actor=ACTOR, tenant=other_tenant, name="B", system_prompt="x"
    )
    number_service.assign_agent(
        actor=ACTOR, tenant=other_tenant, number_id=number.id, agent_id=agent.id
    )
    billing.grant(actor=ACTOR, tenant=other_tenant, minutes=5)
    ours = start(client, runtime_headers, did, providerCallId="same")
    theirs = start(client, runtime_headers, "+6221555777", providerCallId="same")
    assert ours.status_code == theirs.status_code == 201
    assert ours.json["id"] != theirs.json["id"]


@pytest.mark.parametrize(
    "fields",
    [
        {"did": "0215550"},
        {"callerNumber": "not a number"},
        {"direction": "sideways"},
        {"providerCallId": ""},
        {"extra": 1},
    ],
)
def test_start_call_rejects_invalid_fields(client, runtime_headers, did, fields):
    body = {"did": did, "callerNumber": CALLER, **fields}
    response = client.post(RUNTIME, json=body, headers=runtime_headers)
    error = assert_error(response, 422, "validation_error")
    assert set(error["details"]) == set(fields)
    assert Call.select().count() == 0


def test_start_call_requires_did_and_caller(client, runtime_headers):
    error = assert_error(
        client.post(RUNTIME, json={}, headers=runtime_headers), 422, "validation_error"
    )
    assert set(error["details"]) == {"did", "callerNumber"}


def assert_rejected(response, code):
    error = assert_error(response, 409, code)
    call = Call.get_by_id(error["details"]["callId"])
    assert (call.status, call.hangup_reason, call.billed_minutes) == ("failed", code, 0)
    assert [e["callId"] for e in events_of("call.started")] == [call.id]
    [ended] = events_of("call.ended")
    assert (ended["callId"], ended["hangupReason"], ended["talkTimeSeconds"]) == (call.id, code, 0)
    return call


def test_number_without_agent_is_recorded_failed_no_agent(client, runtime_headers, tenant, did):
    number = number_service.list_numbers(tenant=tenant)[0]
    number_service.assign_agent(actor=ACTOR, tenant=tenant, number_id=number.id, agent_id=None)
    call = assert_rejected(start(client, runtime_headers, did), "no_agent")
    assert call.agent_id is None


def test_inactive_agent_is_no_agent(client, runtime_headers, tenant, agent_id, did):
    agent_service.update_agent(actor=ACTOR, tenant=tenant, agent_id=agent_id, is_active=False)
    assert_rejected(start(client, runtime_headers, did), "no_agent")


def test_deleted_agent_is_no_agent(client, runtime_headers, tenant, agent_id, did):
    agent_service.delete_agent(actor=ACTOR, tenant=tenant, agent_id=agent_id)
    assert_rejected(start(client, runtime_headers, did), "no_agent")


def test_inactive_number_is_no_agent(client, runtime_headers, did):
    number_service.PhoneNumber.update(is_active=False).execute()
    assert_rejected(start(client, runtime_headers, did), "no_agent")


def test_unknown_number_is_no_agent_and_records_nothing(client, runtime_headers):
    response = start(client, runtime_headers, "+6299999999")
    error = assert_error(response, 409, "no_agent")
    assert error["details"] == {}
    assert Call.select().count() == 0


@pytest.mark.parametrize("balance", [0, -3])
def test_no_credits_is_recorded_failed(client, runtime_headers, tenant, did, balance):
    billing.adjust(tenant=tenant, actor=ACTOR, minutes=balance - 100)
    call = assert_rejected(start(client, runtime_headers, did), "no_credits")
    assert call.agent_id is not None
    assert balance_of(tenant) == balance
    assert Call.select().count() == 1
    assert Tenant.get_by_id(tenant.id).calls_count == 1


def test_repeated_provider_call_id_of_a_rejected_call_is_409_again(
    client, runtime_headers, tenant, did
):
    billing.adjust(tenant=tenant, actor=ACTOR, minutes=-100)
    first = assert_error(start(client, runtime_headers, did, providerCallId="p"), 409, "no_credits")
    billing.grant(actor=ACTOR, tenant=tenant, minutes=10)
    again = assert_error(start(client, runtime_headers, did, providerCallId="p"), 409, "no_credits")
    assert again["details"] == first["details"]
    assert Call.select().count() == 1


# Answering


def test_answered_moves_ringing_to_answered_and_emits(client, runtime_headers, did):
    started = start(client, runtime_headers, did).json
    response = answer(client, runtime_headers, started["id"])
    assert response.status_code == 200
    assert response.json["status"] == "answered" and response.json["answeredAt"].endswith("Z")
    assert events_of("call.answered") == [
        {"callId": started["id"], "agentId": started["agentId"], "startedAt": started["startedAt"]}
    ]


def test_answered_accepts_the_time_it_happened(client, runtime_headers, did):
    call_id = start(client, runtime_headers, did).json["id"]
    response = client.post(
        f"{RUNTIME}/{call_id}/answered",
        json={"answeredAt": "2026-01-02T03:04:05.678+07:00"},
        headers=runtime_headers,
    )
    assert response.json["answeredAt"] == "2026-01-01T20:04:05.678Z"


def test_repeated_answered_changes_nothing(client, runtime_headers, did):
    call_id = start(client, runtime_headers, did).json["id"]
    first = answer(client, runtime_headers, call_id).json
    again = answer(client, runtime_headers, call_id)
    assert again.status_code == 200 and again.json == first
    assert len(events_of("call.answered")) == 1


@pytest.mark.parametrize("status", ["ended", "dropped", "failed"])
def test_answered_after_the_end_is_illegal(client, runtime_headers, did, status):
    call_id = start(client, runtime_headers, did).json["id"]
    end(client, runtime_headers, call_id, status=status)
    error = assert_error(answer(client, runtime_headers, call_id), 409, "illegal_transition")
    assert error["details"] == {"status": status}
    assert events_of("call.answered") == []


def test_unknown_call_is_404(client, runtime_headers):
    for step in ("answered", "ended", "transcript"):
        body = {"ended": end_body(), "transcript": {"transcriptSummary": "x"}}.get(step)
        response = client.post(f"{RUNTIME}/call_nope/{step}", json=body, headers=runtime_headers)
        assert_error(response, 404, "not_found")


# Ending and billing


def test_ended_charges_started_minutes_once(client, runtime_headers, tenant, did):
    call_id = whole_call(client, runtime_headers, did, talkTimeSeconds=61)
    call = Call.get_by_id(call_id)
    assert (call.status, call.billed_minutes, call.talk_time_seconds) == ("ended", 2, 61)
    [usage] = CreditTransaction.select().where(CreditTransaction.type == "usage")
    assert (usage.minutes, usage.balance_after, usage.call_id) == (-2, 98, call_id)
    assert usage.idempotency_key == f"usage:{call_id}"
    refreshed = Tenant.get_by_id(tenant.id)
    assert (refreshed.balance_minutes, refreshed.lifetime_used_minutes) == (98, 2)


def test_ended_returns_the_detail_of_the_call(client, runtime_headers, did):
    call_id = start(client, runtime_headers, did).json["id"]
    answer(client, runtime_headers, call_id)
    ended_at = (utcnow() + timedelta(minutes=2)).replace(microsecond=0)
    response = end(
        client,
        runtime_headers,
        call_id,
        endedAt=ended_at.isoformat() + "Z",
        metadata={"crm": "lead-9"},
    )
    body = response.json
    assert response.status_code == 200
    assert body["endedAt"] == ended_at.isoformat() + ".000Z"
    assert (body["durationSeconds"], body["talkTimeSeconds"], body["aiCostIdr"]) == (95, 80, 1200)
    assert (body["hangupReason"], body["hangupInitiator"]) == ("normal", "caller")
    assert body["billedMinutes"] == 2 and body["metadata"] == {"crm": "lead-9"}


def test_ended_emits_call_ended_with_every_field(client, runtime_headers, did):
    started = start(client, runtime_headers, did).json
    end(client, runtime_headers, started["id"])
    assert events_of("call.ended") == [
        {
            "callId": started["id"],
            "durationSeconds": 95,
            "hangupReason": "normal",
            "phoneNumberId": started["phoneNumberId"],
            "callerNumber": CALLER,
            "calleeNumber": did,
            "talkTimeSeconds": 80,
            "hangupInitiator": "caller",
            "aiCostIdr": 1200,
            "recordingUrl": None,
            "costBreakdown": None,
            "agentVersion": 1,
            "agentId": started["session"]["agentId"],
            "direction": "inbound",
            "campaignId": None,
        }
    ]


def test_repeated_ended_changes_and_charges_nothing(client, runtime_headers, tenant, did):
    call_id = whole_call(client, runtime_headers, did)
    before = Call.get_by_id(call_id).__data__
    again = end(client, runtime_headers, call_id, talkTimeSeconds=3000, hangupReason="other")
    assert again.status_code == 200
    assert again.json["talkTimeSeconds"] == 80 and again.json["hangupReason"] == "normal"
    assert Call.get_by_id(call_id).__data__ == before
    assert CreditTransaction.select().where(CreditTransaction.type == "usage").count() == 1
    assert balance_of(tenant) == 98
    assert len(events_of("call.ended")) == 1


def test_a_different_end_status_after_the_end_is_illegal(client, runtime_headers, did):
    call_id = whole_call(client, runtime_headers, did)
    error = assert_error(
        end(client, runtime_headers, call_id, status="dropped"), 409, "illegal_transition"
    )
    assert error["details"] == {"status": "ended"}


def test_ringing_call_can_end_dropped_without_answer(client, runtime_headers, tenant, did):
    call_id = start(client, runtime_headers, did).json["id"]
    response = end(client, runtime_headers, call_id, status="dropped", talkTimeSeconds=0)
    assert response.json["status"] == "dropped" and response.json["answeredAt"] is None


def test_rejected_call_repeats_its_failure_but_cannot_end_otherwise(
    client, runtime_headers, tenant, did
):
    number_service.PhoneNumber.update(agent=None).execute()
    call_id = start(client, runtime_headers, did).json["error"]["details"]["callId"]
    same = end(client, runtime_headers, call_id, status="failed")
    assert same.status_code == 200 and same.json["hangupReason"] == "no_agent"
    assert_error(end(client, runtime_headers, call_id), 409, "illegal_transition")
    assert balance_of(tenant) == 100


def test_zero_talk_time_bills_zero_minutes_without_ledger_entry(
    client, runtime_headers, tenant, did
):
    call_id = whole_call(client, runtime_headers, did, talkTimeSeconds=0, status="failed")
    assert Call.get_by_id(call_id).billed_minutes == 0
    assert CreditTransaction.select().where(CreditTransaction.type == "usage").count() == 0
    assert balance_of(tenant) == 100


def test_last_call_may_take_the_balance_below_zero(client, runtime_headers, tenant, did):
    billing.adjust(tenant=tenant, actor=ACTOR, minutes=-99)
    whole_call(client, runtime_headers, did, talkTimeSeconds=300)
    assert balance_of(tenant) == -4
    assert_error(start(client, runtime_headers, did), 409, "no_credits")


@pytest.mark.parametrize(
    "fields",
    [
        {"status": "answered"},
        {"durationSeconds": -1},
        {"talkTimeSeconds": "60"},
        {"aiCostIdr": 1.5},
        {"hangupReason": ""},
        {"endedAt": "yesterday"},
        {"endedAt": "0001-01-01T00:00:00+05:00"},  # before the first UTC moment
        {"metadata": []},
        {"billed": 3},
    ],
)
def test_ended_rejects_invalid_fields(client, runtime_headers, did, fields):
    call_id = start(client, runtime_headers, did).json["id"]
    error = assert_error(end(client, runtime_headers, call_id, **fields), 422, "validation_error")
    assert set(error["details"]) == set(fields)
    assert Call.get_by_id(call_id).status == "ringing"


def test_ended_requires_every_report_field(client, runtime_headers, did):
    call_id = start(client, runtime_headers, did).json["id"]
    response = client.post(f"{RUNTIME}/{call_id}/ended", json={}, headers=runtime_headers)
    error = assert_error(response, 422, "validation_error")
    assert set(error["details"]) == {
        "status",
        "durationSeconds",
        "talkTimeSeconds",
        "hangupReason",
        "hangupInitiator",
        "aiCostIdr",
    }


# credits.low


def set_threshold_and_balance(tenant, threshold, balance):
    Tenant.update(low_balance_threshold=threshold).where(Tenant.id == tenant.id).execute()
    billing.adjust(tenant=tenant, actor=ACTOR, minutes=balance - balance_of(tenant))


def test_credits_low_fires_once_per_downward_crossing(client, runtime_headers, tenant, did):
    set_threshold_and_balance(tenant, threshold=10, balance=12)
    whole_call(client, runtime_headers, did, talkTimeSeconds=120)  # 12 -> 10: not below
    assert events_of("credits.low") == []
    whole_call(client, runtime_headers, did, talkTimeSeconds=60)  # 10 -> 9: crosses
    assert events_of("credits.low") == [{"balanceMinutes": 9, "threshold": 10}]
    whole_call(client, runtime_headers, did, talkTimeSeconds=60)  # 9 -> 8: already below
    assert len(events_of("credits.low")) == 1
    billing.grant(actor=ACTOR, tenant=tenant, minutes=20)  # 28
    whole_call(client, runtime_headers, did, talkTimeSeconds=25 * 60)  # 28 -> 3: crosses again
    assert events_of("credits.low")[-1] == {"balanceMinutes": 3, "threshold": 10}
    assert len(events_of("credits.low")) == 2


# Transcript


def test_transcript_is_stored_and_emitted_once_per_text(client, runtime_headers, did):
    call_id = whole_call(client, runtime_headers, did)
    path = f"{RUNTIME}/{call_id}/transcript"
    for text in ("Asked about prices.", "Asked about prices.", "Asked about prices; booked."):
        response = client.post(path, json={"transcriptSummary": text}, headers=runtime_headers)
        assert response.status_code == 200 and response.json["transcriptSummary"] == text
    assert events_of("call.transcript") == [
        {"callId": call_id, "transcriptSummary": "Asked about prices."},
        {"callId": call_id, "transcriptSummary": "Asked about prices; booked."},
    ]


def test_transcript_requires_a_summary_or_turns(client, runtime_headers, did):
    call_id = start(client, runtime_headers, did).json["id"]
    response = client.post(f"{RUNTIME}/{call_id}/transcript", json={}, headers=runtime_headers)
    assert assert_error(response, 422, "validation_error")["details"] == {
        "transcriptSummary": ["Send transcriptSummary, turns or both."]
    }


def test_runtime_body_must_be_json(client, runtime_headers, did):
    response = client.post(
        RUNTIME, data="did=1", headers=runtime_headers, content_type="text/plain"
    )
    assert_error(response, 415, "unsupported_media_type")


# Outbox


def test_each_event_gets_one_delivery_per_subscribed_active_webhook(
    client, runtime_headers, tenant, other_tenant, did
):
    def webhook(owner, events, active=True):
        return Webhook.create(
            id=new_id("wh"),
            tenant=owner,
            url="http://127.0.0.1:9/h",
            events=events,
            secret="s" * 16,
            is_active=active,
        ).id

    everything = webhook(tenant, ["call.started", "call.answered", "call.ended", "call.transcript"])
    ended_only = webhook(tenant, ["call.ended"])
    inactive = webhook(tenant, ["call.started", "call.ended"], active=False)
    foreign = webhook(other_tenant, ["call.started", "call.ended"])
    call_id = whole_call(client, runtime_headers, did)
    client.post(
        f"{RUNTIME}/{call_id}/transcript",
        json={"transcriptSummary": "Hi."},
        headers=runtime_headers,
    )

    def delivered(webhook_id):
        rows = Delivery.select(Delivery, Event).join(Event).where(Delivery.webhook == webhook_id)
        assert all(row.status == "pending" and row.tenant_id == tenant.id for row in rows)
        return sorted(row.event.type for row in rows)

    assert delivered(everything) == sorted(
        ["call.started", "call.answered", "call.ended", "call.transcript"]
    )
    assert delivered(ended_only) == ["call.ended"]
    assert delivered(inactive) == [] and delivered(foreign) == []


def test_event_data_types_follow_the_spec(client, runtime_headers, did):
    call_id = whole_call(client, runtime_headers, did)
    client.post(
        f"{RUNTIME}/{call_id}/transcript",
        json={"transcriptSummary": "Hi."},
        headers=runtime_headers,
    )
    strings = {
        "callId",
        "phoneNumberId",
        "agentId",
        "callerNumber",
        "calleeNumber",
        "did",
        "hangupReason",
        "hangupInitiator",
        "transcriptSummary",
        "startedAt",
        "direction",
    }
    integers = {
        "durationSeconds",
        "talkTimeSeconds",
        "aiCostIdr",
        "balanceMinutes",
        "threshold",
        "agentVersion",
    }
    # null when not reported (no campaign placed the call)
    nullable = {"recordingUrl": str, "costBreakdown": dict, "campaignId": str}
    for event in Event.select():
        for name, value in event.data.items():
            if name in nullable:
                assert value is None or type(value) is nullable[name], (event.type, name)
                continue
            expected = str if name in strings else int
            assert name in strings | integers, name
            assert type(value) is expected, (event.type, name, value)


def test_ended_bounds_metadata_talk_time_and_the_end(client, runtime_headers, did):
    """A runtime cannot store megabytes of metadata on a call, report more talk than the call
    lasted, or end a call before it started: 422 naming the field, nothing changed."""
    call_id = start(client, runtime_headers, did).json["id"]
    answer(client, runtime_headers, call_id)
    big = {"blob": "x" * (16 * 1024)}
    response = end(client, runtime_headers, call_id, metadata=big)
    assert_error(response, 422, "validation_error")
    assert "metadata" in response.json["error"]["details"]
    response = end(client, runtime_headers, call_id, durationSeconds=60, talkTimeSeconds=61)
    assert_error(response, 422, "validation_error")
    assert response.json["error"]["details"] == {
        "talkTimeSeconds": ["Must not be more than durationSeconds."]
    }
    before = (utcnow() - timedelta(hours=1)).replace(microsecond=0).isoformat() + "Z"
    response = end(client, runtime_headers, call_id, endedAt=before)
    assert_error(response, 422, "validation_error")
    assert response.json["error"]["details"] == {
        "endedAt": ["Must not be before the call's start."]
    }
    assert Call.get_by_id(call_id).status == "answered"
    # Just under the bound is taken; merged with what the call holds, it must stay under too.
    Call.update(metadata={"crm": "y" * 9000}).where(Call.id == call_id).execute()
    response = end(client, runtime_headers, call_id, metadata={"notes": "z" * 9000})
    assert_error(response, 422, "validation_error")
    assert "metadata" in response.json["error"]["details"]
    fits = {"blob": "x" * (16 * 1024 - 20)}
    Call.update(metadata={}).where(Call.id == call_id).execute()
    assert end(client, runtime_headers, call_id, metadata=fits).status_code == 200


# The duration a call may report: at most the time it has lived plus DURATION_ALLOWANCE_SECONDS


def usage_entries():
    return CreditTransaction.select().where(CreditTransaction.type == "usage").count()


def test_a_duration_longer_than_the_call_has_lived_is_refused(client, runtime_headers, tenant, did):
    """A call started a second ago cannot report a day: 422 naming durationSeconds, and
    nothing changes, is charged or emitted; the hold and the slot stay taken."""
    call_id = start(client, runtime_headers, did).json["id"]
    answer(client, runtime_headers, call_id)
    backdate(call_id, 1)
    held = Tenant.get_by_id(tenant.id)
    body = end_body(durationSeconds=86_400, talkTimeSeconds=86_000)
    response = client.post(f"{RUNTIME}/{call_id}/ended", json=body, headers=runtime_headers)
    error = assert_error(response, 422, "validation_error")
    (message,) = error["details"]["durationSeconds"]
    assert set(error["details"]) == {"durationSeconds"}
    assert re.fullmatch(
        r"Must be at most the time since the call started plus 60 s: it started ([12]) s ago, "
        r"so at most (6[12]) \(got 86,400\)\.",
        message,
    ), message
    call = Call.get_by_id(call_id)
    assert (call.status, call.ended_at, call.duration_seconds) == ("answered", None, None)
    assert usage_entries() == 0 and events_of("call.ended") == []
    after = Tenant.get_by_id(tenant.id)
    assert (after.balance_minutes, after.reserved_minutes, after.active_calls) == (
        held.balance_minutes,
        held.reserved_minutes,
        held.active_calls,
    )


def test_a_duration_of_the_calls_age_plus_the_allowance_is_taken(
    client, runtime_headers, tenant, did
):
    call_id = start(client, runtime_headers, did).json["id"]
    answer(client, runtime_headers, call_id)
    Call.update(started_at=utcnow() - timedelta(seconds=100)).where(Call.id == call_id).execute()
    body = end_body(durationSeconds=100 + DURATION_ALLOWANCE_SECONDS, talkTimeSeconds=150)
    response = client.post(f"{RUNTIME}/{call_id}/ended", json=body, headers=runtime_headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert (response.json["durationSeconds"], response.json["billedMinutes"]) == (160, 3)
    assert usage_entries() == 1 and len(events_of("call.ended")) == 1


def test_a_call_that_lived_long_may_report_a_long_duration(client, runtime_headers, tenant, did):
    call_id = start(client, runtime_headers, did).json["id"]
    answer(client, runtime_headers, call_id)
    Call.update(started_at=utcnow() - timedelta(hours=2)).where(Call.id == call_id).execute()
    body = end_body(durationSeconds=7_200, talkTimeSeconds=3_000)
    response = client.post(f"{RUNTIME}/{call_id}/ended", json=body, headers=runtime_headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert (response.json["durationSeconds"], response.json["billedMinutes"]) == (7_200, 50)
    assert balance_of(tenant) == 50


def test_a_repeated_end_is_taken_whatever_its_duration(client, runtime_headers, tenant, did):
    """The rule is for the end that ends the call: a repeat of an end already taken answers
    200 unchanged, however long it says the call was, and another status is still 409."""
    call_id = whole_call(client, runtime_headers, did)
    before = Call.get_by_id(call_id).__data__
    path = f"{RUNTIME}/{call_id}/ended"
    again = end_body(durationSeconds=86_400, talkTimeSeconds=86_400)
    response = client.post(path, json=again, headers=runtime_headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert (response.json["durationSeconds"], response.json["billedMinutes"]) == (95, 2)
    assert Call.get_by_id(call_id).__data__ == before
    assert usage_entries() == 1 and len(events_of("call.ended")) == 1
    other = client.post(path, json={**again, "status": "dropped"}, headers=runtime_headers)
    assert_error(other, 409, "illegal_transition")
