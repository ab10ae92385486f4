"""Calls: list and detail, fields and types per SPEC.md, filters, pagination and its total."""

from datetime import datetime, timedelta

import pytest

from app.models import Call, Tenant
from app.services import pages
from app.services import phone_numbers as number_service
from tests.call_flow import CALLER, RUNTIME, answer, end, start, whole_call
from tests.helpers import ACTOR, assert_error

LIST_FIELDS = {
    "id": str,
    "phoneNumberId": str,
    "agentId": str,
    "callerNumber": str,
    "calleeNumber": str,
    "direction": str,
    "status": str,
    "startedAt": str,
    "endedAt": str,
    "durationSeconds": int,
    "talkTimeSeconds": int,
    "hangupReason": str,
    "transcriptSummary": str,
    "aiCostIdr": int,
    "metadata": dict,
    "agentVersion": int,
    "successful": type(None),  # the verdict of a done analysis; this call is not analysed
}
DETAIL_FIELDS = {
    **LIST_FIELDS,
    "answeredAt": str,
    "hangupInitiator": str,
    "billedMinutes": int,
    "functionCalls": int,
    "variables": dict,
    "recordingUrl": str,
    "costBreakdown": dict,
    "campaignId": str,
    "analysis": dict,
}
RECORDING = "https://recordings.example.com/calls/7.wav"
COSTS = {"llm": 700, "stt": 200, "tts": 250, "telephony": 50, "other": 0}


def finished_call(client, runtime_headers, did):
    call_id = start(client, runtime_headers, did, variables={"name": "Budi"}).json["id"]
    answer(client, runtime_headers, call_id)
    ended = end(
        client,
        runtime_headers,
        call_id,
        metadata={"ticket": 7},
        recordingUrl=RECORDING,
        costBreakdown=COSTS,
    )
    assert ended.status_code == 200, ended.get_data(as_text=True)
    client.post(
        f"{RUNTIME}/{call_id}/transcript",
        json={"transcriptSummary": "Booked a visit."},
        headers=runtime_headers,
    )
    return call_id


def calls_at(client, runtime_headers, did, *moments, **fields):
    """Start one call per moment and set its startedAt; return the ids in that order."""
    ids = []
    for moment in moments:
        call_id = start(client, runtime_headers, did, **fields).json["id"]
        Call.update(started_at=moment).where(Call.id == call_id).execute()
        ids.append(call_id)
    return ids


def listed(client, headers, query=""):
    response = client.get(f"/api/v1/calls{query}", headers=headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.json


def test_list_is_wrapped_with_pagination(client, headers):
    assert listed(client, headers) == {
        "calls": [],
        "pagination": {"total": 0, "limit": 50, "offset": 0, "hasMore": False},
    }


def test_list_fields_and_types_follow_the_spec(client, headers, runtime_headers, did):
    call_id = finished_call(client, runtime_headers, did)
    [call] = listed(client, headers)["calls"]
    assert list(call) == list(LIST_FIELDS)
    for name, kind in LIST_FIELDS.items():
        assert type(call[name]) is kind, name
    assert call["id"] == call_id and call["status"] == "ended"
    assert (call["callerNumber"], call["calleeNumber"], call["direction"]) == (
        CALLER,
        did,
        "inbound",
    )
    assert call["transcriptSummary"] == "Booked a visit." and call["metadata"] == {"ticket": 7}
    for stamp in ("startedAt", "endedAt"):
        assert datetime.strptime(call[stamp], "%Y-%m-%dT%H:%M:%S.%fZ") and len(call[stamp]) == 24


def test_detail_adds_answer_initiator_billing_and_function_calls(
    client, headers, runtime_headers, did
):
    call_id = finished_call(client, runtime_headers, did)
    response = client.get(f"/api/v1/calls/{call_id}", headers=headers)
    assert response.status_code == 200
    call = response.json
    assert list(call) == list(DETAIL_FIELDS)
    assert call["campaignId"] is None  # an inbound call
    assert call["analysis"] is None  # a call without transcript turns is not analysed
    for name, kind in DETAIL_FIELDS.items():
        if name not in ("campaignId", "analysis"):
            assert type(call[name]) is kind, name
    assert (call["hangupInitiator"], call["billedMinutes"], call["functionCalls"]) == (
        "caller",
        2,
        0,
    )
    assert call["answeredAt"] >= call["startedAt"]
    assert call["variables"] == {"name": "Budi"}
    assert (call["recordingUrl"], call["costBreakdown"]) == (RECORDING, COSTS)


def test_detail_of_a_call_without_recording_or_breakdown_has_nulls(
    client, headers, runtime_headers, did
):
    call_id = whole_call(client, runtime_headers, did)
    call = client.get(f"/api/v1/calls/{call_id}", headers=headers).json
    assert (call["recordingUrl"], call["costBreakdown"], call["variables"]) == (None, None, {})


def test_ringing_call_has_nulls_for_what_is_not_known_yet(client, headers, runtime_headers, did):
    call_id = start(client, runtime_headers, did).json["id"]
    call = client.get(f"/api/v1/calls/{call_id}", headers=headers).json
    unknown = (
        "endedAt",
        "durationSeconds",
        "talkTimeSeconds",
        "hangupReason",
        "aiCostIdr",
        "recordingUrl",
        "costBreakdown",
    )
    assert all(call[name] is None for name in unknown)
    assert call["transcriptSummary"] is None and call["billedMinutes"] is None


def test_unknown_call_is_404(client, headers):
    assert_error(client.get("/api/v1/calls/call_nope", headers=headers), 404, "not_found")


def test_calls_need_an_api_key(client):
    assert_error(client.get("/api/v1/calls"), 401, "unauthorized")
    assert_error(client.get("/api/v1/calls/call_x"), 401, "unauthorized")


def test_other_tenants_calls_are_not_listed(client, headers, other_headers, runtime_headers, did):
    call_id = finished_call(client, runtime_headers, did)
    assert listed(client, other_headers)["calls"] == []
    assert listed(client, other_headers)["pagination"]["total"] == 0
    assert_error(client.get(f"/api/v1/calls/{call_id}", headers=other_headers), 404, "not_found")


def test_newest_first_with_ties_by_id(client, headers, runtime_headers, did):
    base = datetime(2026, 5, 1, 12)
    older, newer = calls_at(client, runtime_headers, did, base, base + timedelta(hours=1))
    tied = calls_at(client, runtime_headers, did, base, base)
    ids = [call["id"] for call in listed(client, headers)["calls"]]
    assert ids == [newer, *sorted([older, *tied], reverse=True)]


def test_pagination_limit_offset_and_has_more(client, headers, runtime_headers, did):
    base = datetime(2026, 5, 1)
    ids = calls_at(client, runtime_headers, did, *(base + timedelta(minutes=i) for i in range(5)))
    newest_first = ids[::-1]
    first = listed(client, headers, "?limit=2")
    assert [c["id"] for c in first["calls"]] == newest_first[:2]
    assert first["pagination"] == {"total": 5, "limit": 2, "offset": 0, "hasMore": True}
    last = listed(client, headers, "?limit=2&offset=4")
    assert [c["id"] for c in last["calls"]] == newest_first[4:]
    assert last["pagination"] == {"total": 5, "limit": 2, "offset": 4, "hasMore": False}
    beyond = listed(client, headers, "?offset=10")
    assert beyond["calls"] == [] and beyond["pagination"]["hasMore"] is False


def test_unfiltered_total_is_the_maintained_count(client, headers, runtime_headers, tenant, did):
    whole_call(client, runtime_headers, did)
    number_service.PhoneNumber.update(agent=None).execute()
    start(client, runtime_headers, did)  # refused calls are calls too
    assert Tenant.get_by_id(tenant.id).calls_count == 2
    assert listed(client, headers)["pagination"]["total"] == 2


def test_filtered_total_is_bounded(client, headers, runtime_headers, did, monkeypatch):
    calls_at(client, runtime_headers, did, *[datetime(2026, 5, 1)] * 4)
    monkeypatch.setattr(pages, "COUNT_LIMIT", 3)
    page = listed(client, headers, "?status=ringing&limit=1&offset=3")
    assert page["pagination"] == {"total": 3, "limit": 1, "offset": 3, "hasMore": False}
    assert len(page["calls"]) == 1
    assert listed(client, headers, "?status=ringing&limit=1")["pagination"]["hasMore"] is True


def test_filter_by_status(client, headers, runtime_headers, did):
    ended = whole_call(client, runtime_headers, did)
    ringing = start(client, runtime_headers, did).json["id"]
    answered = start(client, runtime_headers, did).json["id"]
    answer(client, runtime_headers, answered)
    dropped = start(client, runtime_headers, did).json["id"]
    end(client, runtime_headers, dropped, status="dropped")
    for status, call_id in [
        ("ended", ended),
        ("ringing", ringing),
        ("answered", answered),
        ("dropped", dropped),
    ]:
        page = listed(client, headers, f"?status={status}")
        assert [c["id"] for c in page["calls"]] == [call_id]
        assert page["pagination"]["total"] == 1
    assert listed(client, headers, "?status=failed")["calls"] == []


def test_filter_by_from_and_to(client, headers, runtime_headers, did):
    ids = calls_at(
        client,
        runtime_headers,
        did,
        datetime(2026, 4, 30, 23, 59, 59),
        datetime(2026, 5, 1, 0, 0, 0),
        datetime(2026, 5, 1, 18, 30),
        datetime(2026, 5, 2, 0, 0, 0),
    )

    def ids_for(query):
        return sorted(c["id"] for c in listed(client, headers, query)["calls"])

    assert ids_for("?from=2026-05-01") == sorted(ids[1:])
    assert ids_for("?to=2026-05-01") == [ids[0]]
    assert ids_for("?from=2026-05-01&to=2026-05-02") == sorted(ids[1:3])
    assert ids_for("?from=2026-05-01T18:30:00Z") == sorted(ids[2:])
    assert ids_for("?from=2026-05-01T19:30:00%2B01:00&to=2026-05-01T18:30:00.001Z") == [ids[2]]


def test_filter_by_agent_number_and_direction(
    client, headers, runtime_headers, tenant, agent_id, did
):
    inbound = start(client, runtime_headers, did).json
    outbound = start(client, runtime_headers, did, direction="outbound").json
    other_agent = client.post(
        "/api/v1/agents", json={"name": "B", "systemPrompt": "x"}, headers=headers
    ).json["id"]
    second = number_service.add_number(actor=ACTOR, tenant=tenant, display_number="+6221555011")
    number_service.assign_agent(
        actor=ACTOR, tenant=tenant, number_id=second.id, agent_id=other_agent
    )
    elsewhere = start(client, runtime_headers, "+6221555011").json

    def ids_for(query):
        return sorted(c["id"] for c in listed(client, headers, query)["calls"])

    assert ids_for(f"?agentId={agent_id}") == sorted([inbound["id"], outbound["id"]])
    assert ids_for(f"?agentId={other_agent}") == [elsewhere["id"]]
    assert ids_for(f"?phoneNumberId={second.id}") == [elsewhere["id"]]
    assert ids_for("?direction=outbound") == [outbound["id"]]
    assert ids_for(f"?direction=inbound&agentId={agent_id}") == [inbound["id"]]
    assert ids_for("?agentId=agent_unknown") == []


def test_filter_by_caller_number_exact_or_its_first_digits(client, headers, runtime_headers, did):
    callers = ["+6281234567890", "+6281299999999", "+6281300000000", "+6289000000001"]
    ids = {
        number: start(client, runtime_headers, did, callerNumber=number).json["id"]
        for number in callers
    }

    def ids_for(query):
        return sorted(c["id"] for c in listed(client, headers, query)["calls"])

    assert ids_for("?callerNumber=%2B6281234567890") == [ids["+6281234567890"]]
    # An unencoded + is a space in a query string: the number is still found.
    assert ids_for("?callerNumber=+6281234567890") == [ids["+6281234567890"]]
    assert ids_for("?callerNumber=6281234567890") == [ids["+6281234567890"]]
    assert ids_for("?callerNumber=%2B62812") == []  # not a number anybody called from
    both = sorted([ids["+6281234567890"], ids["+6281299999999"]])
    assert ids_for("?callerNumber=%2B62812*") == both
    assert ids_for("?callerNumber=%2B628129*") == [ids["+6281299999999"]]
    assert ids_for("?callerNumber=62819*") == []  # +62819 would end before +62820
    assert ids_for("?callerNumber=%2B6281*") == sorted([*both, ids["+6281300000000"]])
    assert ids_for("?callerNumber=%2B62*") == sorted(ids.values())
    page = listed(client, headers, "?callerNumber=%2B62812*&limit=1")
    assert page["pagination"]["total"] == 2 and page["pagination"]["hasMore"] is True


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("callerNumber=%2B62-812", "callerNumber"),
        ("callerNumber=*", "callerNumber"),
        ("callerNumber=%2B6281*5", "callerNumber"),
        ("callerNumber=%2B" + "1" * 16, "callerNumber"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=ten", "limit"),
        ("offset=-1", "offset"),
        ("status=busy", "status"),
        ("from=yesterday", "from"),
        ("to=2026-13-01", "to"),
        ("from=2026-05-01T25:00", "from"),
        ("direction=up", "direction"),
    ],
)
def test_bad_query_parameters_are_422_naming_them(client, headers, query, field):
    response = client.get(f"/api/v1/calls?{query}", headers=headers)
    error = assert_error(response, 422, "validation_error")
    assert list(error["details"]) == [field]
    assert field in error["message"]


def test_limit_bounds_are_accepted(client, headers):
    assert listed(client, headers, "?limit=1")["pagination"]["limit"] == 1
    assert listed(client, headers, "?limit=100")["pagination"]["limit"] == 100


def test_a_query_parameter_given_twice_takes_its_first_value(client, headers):
    assert listed(client, headers, "?limit=2&limit=7")["pagination"]["limit"] == 2
    response = client.get("/api/v1/calls?limit=2&limit=zero", headers=headers)
    assert response.status_code == 200


def test_an_unknown_query_parameter_is_ignored(client, headers):
    """Only bodies reject unknown fields: a query string may carry a cache buster."""
    assert listed(client, headers, "?limit=2&_=1700000000")["pagination"]["limit"] == 2
