"""Agent versions in calls (DESIGN.md section 11): numbers follow the latest version or are
pinned to one, a call records the version it was answered with and keeps calling that
version's functions (real endpoints on 127.0.0.1), and each version's calls are counted."""

import hashlib
import hmac
import threading
import time
from datetime import timedelta

import pytest

from app.db import unit_of_work
from app.models import Call
from app.services import agents as agent_service
from app.util import utcnow
from tests.call_flow import RUNTIME, answer, end, start
from tests.helpers import assert_error
from tests.receiver import Answer, Receiver

PARAMETERS = {
    "type": "object",
    "properties": {"orderId": {"type": "string", "description": "Order number."}},
}
SECRET = "fsec-pinned-secret-0123456789"


def assign(client, headers, number_id, agent_id, **fields):
    return client.post(
        f"/api/v1/phone-numbers/{number_id}/assign-agent",
        json={"agentId": agent_id, **fields},
        headers=headers,
    )


def number_id_of(client, headers):
    [number] = client.get("/api/v1/phone-numbers", headers=headers).json["phoneNumbers"]
    return number["id"]


def patch(client, headers, agent_id, **fields):
    response = client.patch(f"/api/v1/agents/{agent_id}", json=fields, headers=headers)
    assert response.status_code == 200, response.json
    return response.json


def define(client, headers, agent_id, url, **fields):
    response = client.post(
        f"/api/v1/agents/{agent_id}/functions",
        json={
            "name": "lookup_order",
            "description": "Look up an order.",
            "endpoint": url,
            "parameters": PARAMETERS,
            "secret": SECRET,
            **fields,
        },
        headers=headers,
    )
    assert response.status_code == 201, response.json


def invoke(client, runtime_headers, call_id, **parameters):
    return client.post(
        f"{RUNTIME}/{call_id}/function-calls",
        json={"functionName": "lookup_order", "parameters": parameters},
        headers=runtime_headers,
    )


def open_call(client, runtime_headers, did):
    response = start(client, runtime_headers, did)
    assert response.status_code == 201, response.json
    assert answer(client, runtime_headers, response.json["id"]).status_code == 200
    return response.json


def test_a_number_follows_the_latest_version_by_default(
    client, headers, runtime_headers, agent_id, did
):
    number = client.get("/api/v1/phone-numbers", headers=headers).json["phoneNumbers"][0]
    assert number["agentVersion"] is None
    patch(client, headers, agent_id, systemPrompt="Be brief.")
    started = start(client, runtime_headers, did).json
    assert started["agentVersion"] == started["session"]["agentVersion"] == 2
    assert started["session"]["systemPrompt"] == "Be brief."


def test_a_pinned_number_answers_with_its_version_after_the_agent_changed(
    client, headers, runtime_headers, agent_id, did
):
    patch(client, headers, agent_id, systemPrompt="Version two.", voiceId="Kore")
    response = assign(client, headers, number_id_of(client, headers), agent_id, agentVersion=1)
    assert response.status_code == 200
    assert (response.json["agentId"], response.json["agentVersion"]) == (agent_id, 1)
    patch(client, headers, agent_id, systemPrompt="Version three.", maxCallDurationMinutes=3)
    started = start(client, runtime_headers, did).json
    session = started["session"]
    assert (started["agentVersion"], session["agentVersion"]) == (1, 1)
    assert (session["systemPrompt"], session["voiceId"]) == ("Be helpful.", "Puck")
    assert session["maxCallDurationSeconds"] == 600  # version 1's 10 minutes, not 3
    detail = client.get(f"/api/v1/calls/{started['id']}", headers=headers).json
    assert detail["agentVersion"] == 1


def test_assigning_again_without_a_version_follows_the_latest_again(
    client, headers, runtime_headers, agent_id, did
):
    number_id = number_id_of(client, headers)
    assign(client, headers, number_id, agent_id, agentVersion=1)
    patch(client, headers, agent_id, systemPrompt="Be brief.")
    response = assign(client, headers, number_id, agent_id)
    assert response.json["agentVersion"] is None
    assert start(client, runtime_headers, did).json["session"]["systemPrompt"] == "Be brief."


def test_the_repeated_start_of_a_call_keeps_its_version(
    client, headers, runtime_headers, agent_id, did
):
    first = start(client, runtime_headers, did, providerCallId="p-1").json
    patch(client, headers, agent_id, systemPrompt="Be brief.")
    again = start(client, runtime_headers, did, providerCallId="p-1")
    assert again.status_code == 200
    assert again.json["id"] == first["id"]
    assert again.json["session"]["agentVersion"] == 1
    assert again.json["session"]["systemPrompt"] == "Be helpful."


def test_a_pin_to_a_version_the_agent_lacks_is_422(client, headers, agent_id, did):
    number_id = number_id_of(client, headers)
    error = assert_error(
        assign(client, headers, number_id, agent_id, agentVersion=2), 422, "validation_error"
    )
    assert error["details"] == {
        "agentVersion": [f"Agent {agent_id} has versions 1 to 1; 2 is none of them."]
    }
    for bad in (0, "1", 1.5):
        response = assign(client, headers, number_id, agent_id, agentVersion=bad)
        assert "agentVersion" in assert_error(response, 422, "validation_error")["details"]
    response = assign(client, headers, number_id, None, agentVersion=1)
    assert "agentVersion" in assert_error(response, 422, "validation_error")["details"]
    number = client.get("/api/v1/phone-numbers", headers=headers).json["phoneNumbers"][0]
    assert (number["agentId"], number["agentVersion"]) == (agent_id, None)


def test_a_pin_to_another_tenants_agent_is_404(client, headers, other_headers, did):
    other = client.post(
        "/api/v1/agents", json={"name": "B", "systemPrompt": "x"}, headers=other_headers
    ).json["id"]
    response = assign(client, headers, number_id_of(client, headers), other, agentVersion=1)
    assert_error(response, 404, "not_found")


def test_unassigning_or_deleting_the_agent_ends_the_pin(client, headers, agent_id, did):
    number_id = number_id_of(client, headers)
    assign(client, headers, number_id, agent_id, agentVersion=1)
    assert assign(client, headers, number_id, None).json["agentVersion"] is None
    assign(client, headers, number_id, agent_id, agentVersion=1)
    assert client.delete(f"/api/v1/agents/{agent_id}", headers=headers).status_code == 204
    number = client.get("/api/v1/phone-numbers", headers=headers).json["phoneNumbers"][0]
    assert (number["agentId"], number["agentVersion"]) == (None, None)


def test_calls_are_listed_by_the_version_they_were_answered_with(
    client, headers, runtime_headers, agent_id, did
):
    first = start(client, runtime_headers, did).json["id"]
    patch(client, headers, agent_id, systemPrompt="Be brief.")
    second = start(client, runtime_headers, did).json["id"]
    listed = client.get(
        "/api/v1/calls", query_string={"agentId": agent_id, "agentVersion": 1}, headers=headers
    ).json
    assert [call["id"] for call in listed["calls"]] == [first]
    assert listed["calls"][0]["agentVersion"] == 1
    assert listed["pagination"]["total"] == 1
    both = client.get("/api/v1/calls", query_string={"agentId": agent_id}, headers=headers).json
    assert [call["agentVersion"] for call in both["calls"]] == [2, 1]
    assert both["calls"][0]["id"] == second


def test_the_version_filter_needs_the_agent(client, headers):
    response = client.get("/api/v1/calls?agentVersion=1", headers=headers)
    error = assert_error(response, 422, "validation_error")
    assert error["details"] == {"agentVersion": ["A version is an agent's: send agentId with it."]}
    response = client.get("/api/v1/calls?agentId=agent_x&agentVersion=0", headers=headers)
    assert "agentVersion" in assert_error(response, 422, "validation_error")["details"]


def test_a_pinned_call_keeps_calling_its_versions_endpoint_after_the_latest_changed_it(
    client, headers, runtime_headers, agent_id, did
):
    with (
        Receiver(lambda r: Answer(body=b'{"from": "old"}')) as old,
        Receiver(lambda r: Answer(body=b'{"from": "new"}')) as new,
    ):
        define(client, headers, agent_id, old.url + "/orders")  # version 2
        assign(client, headers, number_id_of(client, headers), agent_id, agentVersion=2)
        pinned = open_call(client, runtime_headers, did)["id"]
        path = f"/api/v1/agents/{agent_id}/functions/lookup_order"
        moved = client.patch(
            path, json={"endpoint": new.url + "/orders", "method": "PUT"}, headers=headers
        )
        assert moved.status_code == 200  # version 3
        assert invoke(client, runtime_headers, pinned, orderId="A").json == {
            "result": {"from": "old"}
        }
        # The next call on the number is pinned too; a call on the latest version (the
        # number following it) calls the new endpoint.
        assert invoke(
            client, runtime_headers, open_call(client, runtime_headers, did)["id"], orderId="B"
        ).json == {"result": {"from": "old"}}
        assign(client, headers, number_id_of(client, headers), agent_id)
        latest = open_call(client, runtime_headers, did)["id"]
        assert invoke(client, runtime_headers, latest, orderId="C").json == {
            "result": {"from": "new"}
        }
        # The pinned call again, after the latest version deleted the function.
        assert client.delete(path, headers=headers).status_code == 204
        assert invoke(client, runtime_headers, pinned, orderId="D").json == {
            "result": {"from": "old"}
        }
        assert invoke(client, runtime_headers, latest, orderId="E").json == {
            "result": {"from": "new"}
        }
    assert [(r.method, r.json()["parameters"]["orderId"]) for r in old.requests] == [
        ("POST", "A"),
        ("POST", "B"),
        ("POST", "D"),
    ]
    assert [(r.method, r.json()["parameters"]["orderId"]) for r in new.requests] == [
        ("PUT", "C"),
        ("PUT", "E"),
    ]
    # Signed with the function's secret, which the deleted function kept.
    for request in old.requests:
        expected = hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
        assert request.headers["X-Service-Signature"] == f"sha256={expected}"


def test_a_call_answered_before_a_function_existed_does_not_have_it(
    client, headers, runtime_headers, agent_id, did
):
    with Receiver() as endpoint:
        call_id = open_call(client, runtime_headers, did)["id"]
        define(client, headers, agent_id, endpoint.url)
        response = invoke(client, runtime_headers, call_id, orderId="A")
    assert response.json["error"]["code"] == "unknown_function"
    assert endpoint.requests == []


def test_a_pinned_call_signs_with_the_functions_rotated_secret(
    client, headers, runtime_headers, agent_id, did
):
    with Receiver(lambda r: Answer(body=b"{}")) as endpoint:
        define(client, headers, agent_id, endpoint.url)
        call_id = open_call(client, runtime_headers, did)["id"]
        rotated = client.post(
            f"/api/v1/agents/{agent_id}/functions/lookup_order/rotate-secret",
            json={"secret": "r" * 20, "overlapHours": 0},
            headers=headers,
        )
        assert rotated.status_code == 200
        assert invoke(client, runtime_headers, call_id).json == {"result": {}}
    [request] = endpoint.requests
    expected = hmac.new(b"r" * 20, request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Service-Signature"] == f"sha256={expected}"


def test_restored_functions_answer_the_next_call(client, headers, runtime_headers, agent_id, did):
    with Receiver(lambda r: Answer(body=b'{"ok": true}')) as endpoint:
        define(client, headers, agent_id, endpoint.url)  # version 2
        path = f"/api/v1/agents/{agent_id}/functions/lookup_order"
        assert client.delete(path, headers=headers).status_code == 204  # 3
        gone = open_call(client, runtime_headers, did)["id"]
        assert invoke(client, runtime_headers, gone).json["error"]["code"] == "unknown_function"
        restored = client.post(f"/api/v1/agents/{agent_id}/versions/2/restore", headers=headers)
        assert restored.json["version"] == 4
        call = open_call(client, runtime_headers, did)
        assert call["session"]["functions"][0]["name"] == "lookup_order"
        assert invoke(client, runtime_headers, call["id"]).json == {"result": {"ok": True}}
    [request] = endpoint.requests
    expected = hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Service-Signature"] == f"sha256={expected}"


def finish(client, runtime_headers, call_id, talk_time, **fields):
    response = end(
        client,
        runtime_headers,
        call_id,
        talkTimeSeconds=talk_time,
        durationSeconds=talk_time,
        **fields,
    )
    assert response.status_code == 200, response.json


def test_stats_count_each_versions_calls(client, headers, runtime_headers, agent_id, did):
    with Receiver(
        lambda r: Answer(status=500) if b'"fail"' in r.body else Answer(body=b"{}")
    ) as endpoint:
        define(client, headers, agent_id, endpoint.url)  # version 2
        # Version 2: two answered calls (60 s and 150 s, three function calls, one failing)
        # and one never answered.
        first = open_call(client, runtime_headers, did)["id"]
        invoke(client, runtime_headers, first, orderId="ok")
        invoke(client, runtime_headers, first, orderId="fail")
        finish(client, runtime_headers, first, 60, aiCostIdr=500)
        second = open_call(client, runtime_headers, did)["id"]
        invoke(client, runtime_headers, second, orderId="ok")
        finish(client, runtime_headers, second, 150, aiCostIdr=700)
        unanswered = start(client, runtime_headers, did).json["id"]
        finish(client, runtime_headers, unanswered, 0, status="failed", aiCostIdr=0)
        patch(client, headers, agent_id, systemPrompt="Be brief.")  # version 3
        third = open_call(client, runtime_headers, did)["id"]
        finish(client, runtime_headers, third, 30, aiCostIdr=100)
    response = client.get(f"/api/v1/agents/{agent_id}/stats", headers=headers)
    assert response.status_code == 200
    assert response.json == {
        "versions": [
            {
                "version": 3,
                "calls": 1,
                "answered": 1,
                "answeredShare": 1.0,
                "avgTalkTimeSeconds": 30.0,
                "billedMinutes": 1,
                "functionCalls": 0,
                "functionErrorRate": None,
                "aiCostIdr": 100,
                "analyzedCalls": 0,
                "successfulCalls": 0,
                "successRate": None,
            },
            {
                "version": 2,
                "calls": 3,
                "answered": 2,
                "answeredShare": 0.6667,
                "avgTalkTimeSeconds": 105.0,
                "billedMinutes": 4,
                "functionCalls": 3,
                "functionErrorRate": 0.3333,
                "aiCostIdr": 1200,
                "analyzedCalls": 0,
                "successfulCalls": 0,
                "successRate": None,
            },
        ]
    }


def test_stats_cover_the_range_asked_for(client, headers, runtime_headers, agent_id, did):
    old = open_call(client, runtime_headers, did)["id"]
    Call.update(started_at=utcnow() - timedelta(days=40)).where(Call.id == old).execute()
    open_call(client, runtime_headers, did)
    stats = client.get(f"/api/v1/agents/{agent_id}/stats", headers=headers).json
    assert [(row["version"], row["calls"]) for row in stats["versions"]] == [(1, 1)]
    since = (utcnow() - timedelta(days=60)).date().isoformat()
    stats = client.get(f"/api/v1/agents/{agent_id}/stats?from={since}", headers=headers).json
    assert [(row["version"], row["calls"]) for row in stats["versions"]] == [(1, 2)]
    until = (utcnow() - timedelta(days=30)).date().isoformat()
    query = f"from={since}&to={until}"
    stats = client.get(f"/api/v1/agents/{agent_id}/stats?{query}", headers=headers).json
    assert [(row["version"], row["calls"]) for row in stats["versions"]] == [(1, 1)]
    response = client.get(
        f"/api/v1/agents/{agent_id}/stats?from={until}&to={since}", headers=headers
    )
    assert assert_error(response, 422, "validation_error")["details"] == {
        "to": ["Must be after from."]
    }
    response = client.get(f"/api/v1/agents/{agent_id}/stats?from=yesterday", headers=headers)
    assert "from" in assert_error(response, 422, "validation_error")["details"]


def test_stats_of_an_agent_without_calls_are_empty(client, headers, agent_id):
    response = client.get(f"/api/v1/agents/{agent_id}/stats", headers=headers)
    assert response.json == {"versions": []}


@pytest.mark.postgres_only
def test_a_change_to_an_agent_holds_up_no_call_to_its_number(
    app, client, runtime_headers, tenant, agent_id, did
):
    """While a change to the agent holds its row (the versions of one agent are made one at a
    time), a call to its number starts at once: the call's row names the agent, which the lock
    must not refuse, else a function created on the agent (agent, then the tenant's cap lock)
    and a call start (the tenant's row, then the agent's) would wait on each other."""
    locked, release = threading.Event(), threading.Event()

    def hold_the_agent():
        with app.app_context(), unit_of_work():
            agent_service.lock_agent(tenant=tenant, agent_id=agent_id)
            locked.set()
            release.wait(timeout=30)

    holder = threading.Thread(target=hold_the_agent)
    holder.start()
    try:
        assert locked.wait(timeout=10)
        began = time.monotonic()
        response = start(client, runtime_headers, did)
        took = time.monotonic() - began
    finally:
        release.set()
        holder.join()
    assert response.status_code == 201, response.json
    assert took < 2, f"the call start waited {took:.1f} s on the agent's lock"
