"""Whole calls through the runtime API, delivered by a real worker to real receivers.

Each event reaches each subscribed webhook once, with exactly SPEC.md section 6's data
fields and types, and both signatures verify.
"""

import base64
import hashlib
import hmac
import json
import time

import pytest
from standardwebhooks.webhooks import Webhook as StandardWebhook

from app.services import tenants as tenant_service
from tests.call_flow import RUNTIME, answer, end, start
from tests.helpers import ACTOR
from tests.receiver import Answer, Receiver
from tests.system.workers import rq_config

SECRET = "end-to-end-secret-value"
EVENTS = [
    "call.started",
    "call.answered",
    "call.transcript",
    "call.ended",
    "credits.low",
    "function.called",
]
RECORDING = "https://recordings.example.com/call.wav"
DATA_TYPES = {
    "call.started": {"callId": str, "phoneNumberId": str, "callerNumber": str, "did": str},
    "call.answered": {"callId": str, "agentId": str, "startedAt": str},
    "call.transcript": {"callId": str, "transcriptSummary": str},
    "call.ended": {
        "callId": str,
        "durationSeconds": int,
        "hangupReason": str,
        "phoneNumberId": str,
        "callerNumber": str,
        "calleeNumber": str,
        "talkTimeSeconds": int,
        "hangupInitiator": str,
        "aiCostIdr": int,
        "recordingUrl": str,
        "costBreakdown": dict,
        "agentVersion": int,
        "agentId": str,
        "direction": str,
        "campaignId": type(None),
    },
    "credits.low": {"balanceMinutes": int, "threshold": int},
    "function.called": {"callId": str, "functionName": str, "parameters": dict, "result": dict},
}


@pytest.fixture
def app_config(app_config, redis_url, redis_client):
    return rq_config(app_config, redis_url)


def register(client, headers, url, events):
    response = client.post(
        "/api/v1/webhooks", json={"url": url, "events": events, "secret": SECRET}, headers=headers
    )
    assert response.status_code == 201, response.get_data(as_text=True)


def test_whole_call_delivers_every_event_once_with_exact_fields(
    client, headers, runtime_headers, tenant, agent_id, did, workers
):
    tenant_service.set_threshold(actor=ACTOR, tenant=tenant, minutes=99)  # the charge crosses it
    with (
        Receiver() as everything,
        Receiver() as ended_only,
        Receiver(lambda request: Answer(body=b'{"slots": ["10:00"]}')) as endpoint,
    ):
        register(client, headers, everything.url, EVENTS)
        register(client, headers, ended_only.url, ["call.ended"])
        client.post(
            f"/api/v1/agents/{agent_id}/functions",
            json={
                "name": "free_slots",
                "description": "Free appointment slots.",
                "endpoint": endpoint.url,
                "parameters": {
                    "type": "object",
                    "properties": {"day": {"type": "string", "description": "Day."}},
                },
            },
            headers=headers,
        )
        workers.start()
        call_id = start(client, runtime_headers, did).json["id"]
        answer(client, runtime_headers, call_id)
        outcome = client.post(
            f"{RUNTIME}/{call_id}/function-calls",
            json={"functionName": "free_slots", "parameters": {"day": "monday"}},
            headers=runtime_headers,
        )
        assert outcome.json == {"result": {"slots": ["10:00"]}}
        client.post(
            f"{RUNTIME}/{call_id}/transcript",
            json={"transcriptSummary": "Booked Monday 10:00."},
            headers=runtime_headers,
        )
        ended = end(
            client,
            runtime_headers,
            call_id,
            recordingUrl=RECORDING,
            costBreakdown={"llm": 700, "stt": 200, "tts": 250, "telephony": 50},
        )
        assert ended.status_code == 200
        received = everything.wait_for(len(EVENTS), timeout=30)
        ended_only.wait_for(1, timeout=30)
        time.sleep(0.5)  # nothing more arrives
    assert len(everything.requests) == len(EVENTS)
    assert len(ended_only.requests) == 1
    key = base64.b64encode(SECRET.encode()).decode()
    bodies = {}
    for request in received:
        signature = hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
        assert request.headers["X-Service-Signature"] == f"sha256={signature}"
        assert StandardWebhook(key).verify(request.body, request.headers)
        body = json.loads(request.body)
        assert set(body) == {"id", "event", "timestamp", "data"}
        assert request.headers["X-Service-Event-Id"] == body["id"]
        bodies[body["event"]] = body
    assert set(bodies) == set(EVENTS)
    for name, body in bodies.items():
        types = DATA_TYPES[name]
        assert set(body["data"]) == set(types), name
        for field, kind in types.items():
            value = body["data"][field]
            assert isinstance(value, kind) and not isinstance(value, bool), (name, field)
    assert bodies["call.ended"]["data"]["callId"] == call_id
    assert bodies["call.ended"]["data"]["talkTimeSeconds"] == 80
    assert bodies["call.ended"]["data"]["recordingUrl"] == RECORDING
    assert bodies["call.ended"]["data"]["costBreakdown"] == {
        "llm": 700,
        "stt": 200,
        "tts": 250,
        "telephony": 50,
        "other": 0,
    }
    assert bodies["credits.low"]["data"] == {"balanceMinutes": 98, "threshold": 99}
    assert bodies["function.called"]["data"]["result"] == {"slots": ["10:00"]}
    assert json.loads(ended_only.requests[0].body)["id"] == bodies["call.ended"]["id"]
