"""Post-call analysis (DESIGN.md section 17): after a call with turns ends, Gemini (a stand-in
on 127.0.0.1 answering from the request's responseSchema) analyses it with the plan of the
agent's version; the call shows the result, call.analyzed is delivered, and a failure is
retried, then failed with its reason."""

import time

import pytest

from app import queue
from app.models import AuditEntry, Call, Event
from app.services import agents as agent_service
from app.services import billing
from app.services import keys as key_service
from app.services import phone_numbers as number_service
from app.services import tenants as tenant_service
from app.services.calls import analysis as call_analysis
from tests.call_flow import RUNTIME, answer, end, start
from tests.fake_gemini import API_KEY, OUTPUT_TOKENS, PROMPT_TOKENS
from tests.helpers import ACTOR, assert_error
from tests.receiver import Receiver

PLAN = {
    "summary": True,
    "fields": [
        {"name": "customerName", "type": "string", "description": "The caller's name."},
        {"name": "budget", "type": "number", "required": True},
        {"name": "wantsCallback", "type": "boolean"},
        {"name": "interest", "type": "enum", "choices": ["high", "low"]},
    ],
    "successCriteria": "The caller books a viewing.",
}
TURNS = [
    {"role": "agent", "text": "Halo, dengan siapa saya bicara?"},
    {"role": "caller", "text": "Budi. Saya mau lihat rumahnya, budget 1,5 miliar."},
]
# What one request costs at the default prices (4,950 and 41,250 IDR per million tokens).
COST = (PROMPT_TOKENS * 4950 + OUTPUT_TOKENS * 41250) / 1_000_000
FINAL = ("done", "failed", "not_configured")


@pytest.fixture
def app_config(app_config):
    return {**app_config, "GEMINI_API_KEY": API_KEY}


def set_plan(client, headers, agent_id, plan):
    response = client.patch(
        f"/api/v1/agents/{agent_id}", json={"analysisPlan": plan}, headers=headers
    )
    assert response.status_code == 200, response.json
    return response.json["version"]


def call_with_turns(client, runtime_headers, did, turns=TURNS):
    """Start, answer, transcribe (turns) and end a call; its id."""
    call_id = start(client, runtime_headers, did).json["id"]
    assert answer(client, runtime_headers, call_id).status_code == 200
    if turns:
        posted = client.post(
            f"{RUNTIME}/{call_id}/transcript", json={"turns": turns}, headers=runtime_headers
        )
        assert posted.status_code == 200, posted.json
    assert end(client, runtime_headers, call_id).status_code == 200
    return call_id


def analysed(client, headers, call_id, timeout=10.0):
    """The call's analysis once it is final (done, failed, not_configured)."""
    deadline = time.monotonic() + timeout
    while True:
        call = client.get(f"/api/v1/calls/{call_id}", headers=headers).json
        if call["analysis"] and call["analysis"]["status"] in FINAL:
            return call["analysis"]
        assert time.monotonic() < deadline, call["analysis"]
        time.sleep(0.02)


def test_analysis_done_with_each_field_type(
    client, headers, runtime_headers, agent_id, did, fake_gemini
):
    version = set_plan(client, headers, agent_id, PLAN)
    fake_gemini.override = {
        "fields": {"customerName": "Budi", "budget": 1500000000, "wantsCallback": False}
    }
    call_id = call_with_turns(client, runtime_headers, did)
    result = analysed(client, headers, call_id)
    assert result == {
        "status": "done",
        "summary": "summary from the call",
        "successful": True,
        "successReason": "successReason from the call",
        "fields": {
            "customerName": "Budi",
            "budget": 1500000000,
            "wantsCallback": False,
            "interest": "high",
        },
        "planVersion": version,
        "model": "gemini-2.5-flash",
        "analyzedAt": result["analyzedAt"],
        "costIdr": 13,  # ceil(5.94 + 6.1875)
        "reason": None,
    }
    assert result["costIdr"] == -(-COST // 1)
    [request] = fake_gemini.requests
    assert request.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert request.headers["x-goog-api-key"] == API_KEY
    body = request.json()
    assert body["generationConfig"]["responseMimeType"] == "application/json"
    schema = body["generationConfig"]["responseSchema"]
    assert schema["required"] == ["summary", "successful", "successReason", "fields"]
    assert schema["properties"]["fields"] == {
        "type": "OBJECT",
        "properties": {
            "customerName": {
                "type": "STRING",
                "description": "The caller's name.",
                "nullable": True,
            },
            "budget": {"type": "NUMBER"},
            "wantsCallback": {"type": "BOOLEAN", "nullable": True},
            "interest": {"type": "STRING", "enum": ["high", "low"], "nullable": True},
        },
        "required": ["budget"],
    }
    prompt = body["contents"][0]["parts"][0]["text"]
    assert "caller: Budi. Saya mau lihat rumahnya" in prompt
    assert "The caller books a viewing." in prompt
    call = Call.get_by_id(call_id)
    # The summary fills transcriptSummary (the runtime gave none); billing is untouched.
    assert call.transcript_summary == "summary from the call"
    assert (call.successful, call.analysis_cost_idr, call.ai_cost_idr) == (True, 13, 1200)


def test_runtime_summary_is_kept(client, headers, runtime_headers, agent_id, did, fake_gemini):
    call_id = start(client, runtime_headers, did).json["id"]
    answer(client, runtime_headers, call_id)
    client.post(
        f"{RUNTIME}/{call_id}/transcript",
        json={"turns": TURNS, "transcriptSummary": "The runtime's."},
        headers=runtime_headers,
    )
    end(client, runtime_headers, call_id)
    assert analysed(client, headers, call_id)["summary"] == "summary from the call"
    assert Call.get_by_id(call_id).transcript_summary == "The runtime's."


def test_malformed_answer_is_retried_then_failed_with_its_reason(
    client, headers, runtime_headers, agent_id, did, fake_gemini
):
    for _ in range(3):  # the first try and both retries (ANALYSIS_RETRY_DELAYS)
        fake_gemini.then("malformed")
    call_id = call_with_turns(client, runtime_headers, did)
    result = analysed(client, headers, call_id)
    assert result["status"] == "failed"
    assert result["reason"] == "Gemini's answer is malformed JSON. (3 attempts)"
    assert (result["summary"], result["successful"], result["fields"]) == (None, None, {})
    assert len(fake_gemini.requests) == 3
    assert result["costIdr"] == -(-3 * COST // 1)  # every answer was paid for
    assert Call.get_by_id(call_id).successful is None


@pytest.mark.parametrize("status", [429, 500])
def test_429_and_5xx_are_retried_until_an_answer(
    client, headers, runtime_headers, agent_id, did, fake_gemini, status
):
    fake_gemini.then("status", status).then("status", status)
    call_id = call_with_turns(client, runtime_headers, did)
    assert analysed(client, headers, call_id)["status"] == "done"
    assert len(fake_gemini.requests) == 3


def test_a_slow_answer_times_out_and_is_retried(
    app, client, headers, runtime_headers, agent_id, did, fake_gemini
):
    app.config["ANALYSIS_TIMEOUT"] = 0.3
    fake_gemini.then("slow", 1.0)
    call_id = call_with_turns(client, runtime_headers, did)
    assert analysed(client, headers, call_id)["status"] == "done"
    assert len(fake_gemini.requests) == 2


@pytest.mark.parametrize(
    "wrong, reason",
    [
        ({"budget": "a lot"}, "The field budget (number) is not a number: 'a lot'."),
        ({"interest": "medium"}, "The field interest (enum) is not one of high, low: 'medium'."),
        (
            {"wantsCallback": "yes"},
            "The field wantsCallback (boolean) is not true or false: 'yes'.",
        ),
        ({"budget": None}, "The required field budget is missing."),
    ],
)
def test_an_answer_that_does_not_fit_the_plan_fails_with_its_reason(
    client, headers, runtime_headers, agent_id, did, fake_gemini, wrong, reason
):
    set_plan(client, headers, agent_id, PLAN)
    fake_gemini.then("wrong", wrong)
    call_id = call_with_turns(client, runtime_headers, did)
    result = analysed(client, headers, call_id)
    assert (result["status"], result["reason"]) == ("failed", reason)
    assert result["fields"] == {}
    assert len(fake_gemini.requests) == 1  # not retried: the answer was read


def test_a_call_without_turns_is_not_analysed(
    client, headers, runtime_headers, agent_id, did, fake_gemini
):
    call_id = call_with_turns(client, runtime_headers, did, turns=[])
    assert client.get(f"/api/v1/calls/{call_id}", headers=headers).json["analysis"] is None
    response = client.post(f"/api/v1/calls/{call_id}/analyze", headers=headers)
    error = assert_error(response, 409, "no_transcript")
    assert error["message"] == "The call has no transcript turns to analyse."
    assert fake_gemini.requests == []


def test_a_call_its_runtime_lost_is_analysed_from_the_turns_it_has(
    client, headers, runtime_headers, agent_id, did, fake_gemini
):
    """A call whose runtime never reported its end is closed by the hold sweep (runtime_lost);
    the turns posted before are analysed like any ended call's."""
    from datetime import timedelta

    from app.services.calls import lifecycle
    from app.util import utcnow

    set_plan(client, headers, agent_id, PLAN)
    call_id = start(client, runtime_headers, did).json["id"]
    assert answer(client, runtime_headers, call_id).status_code == 200
    posted = client.post(
        f"{RUNTIME}/{call_id}/transcript", json={"turns": TURNS}, headers=runtime_headers
    )
    assert posted.status_code == 200, posted.json
    Call.update(reservation_expires_at=utcnow() - timedelta(seconds=1)).where(
        Call.id == call_id
    ).execute()
    assert lifecycle.release_lapsed_holds() == 1
    analysis = analysed(client, headers, call_id)
    assert analysis["status"] == "done" and set(analysis["fields"]) == {
        "customerName",
        "budget",
        "wantsCallback",
        "interest",
    }
    assert len(fake_gemini.requests) == 1
    call = client.get(f"/api/v1/calls/{call_id}", headers=headers).json
    assert (call["status"], call["hangupReason"]) == ("failed", "runtime_lost")


def test_a_call_not_ended_cannot_be_analysed(client, headers, runtime_headers, did):
    call_id = start(client, runtime_headers, did).json["id"]
    response = client.post(f"/api/v1/calls/{call_id}/analyze", headers=headers)
    error = assert_error(response, 409, "call_not_ended")
    assert error["details"] == {"status": "ringing"}


def test_no_key_is_not_configured_without_a_request(
    app, client, headers, runtime_headers, agent_id, did, fake_gemini
):
    app.config["GEMINI_API_KEY"] = None
    call_id = call_with_turns(client, runtime_headers, did)
    result = analysed(client, headers, call_id)
    assert result["status"] == "not_configured"
    assert (result["summary"], result["successful"], result["costIdr"]) == (None, None, 0)
    assert fake_gemini.requests == []
    assert not Event.select().where(Event.type == "call.analyzed").exists()


def test_reanalysis_after_a_plan_change_uses_the_new_version(
    client, headers, runtime_headers, agent_id, did, fake_gemini
):
    call_id = call_with_turns(client, runtime_headers, did)
    first = analysed(client, headers, call_id)
    assert (first["fields"], first["planVersion"]) == ({}, 1)
    version = set_plan(
        client,
        headers,
        agent_id,
        {"fields": [{"name": "interest", "type": "enum", "choices": ["high", "low"]}]},
    )
    response = client.post(f"/api/v1/calls/{call_id}/analyze", headers=headers)
    assert response.status_code == 202, response.json
    assert response.json["callId"] == call_id
    assert response.json["analysis"]["status"] == "pending"
    again = analysed(client, headers, call_id)
    assert (again["fields"], again["planVersion"]) == ({"interest": "high"}, version)
    entry = AuditEntry.get(AuditEntry.action == "call.analysis_requested")
    assert (entry.target_id, entry.details) == (call_id, {"planVersion": version})


def test_another_tenants_call_is_404(
    client, headers, other_headers, runtime_headers, agent_id, did, fake_gemini
):
    call_id = call_with_turns(client, runtime_headers, did)
    response = client.post(f"/api/v1/calls/{call_id}/analyze", headers=other_headers)
    assert_error(response, 404, "not_found")


def test_call_analyzed_is_delivered_to_a_webhook(
    client, headers, runtime_headers, agent_id, did, fake_gemini
):
    with Receiver() as receiver:
        hook = {"url": f"{receiver.url}/in", "events": ["call.analyzed"], "secret": "s" * 16}
        assert client.post("/api/v1/webhooks", json=hook, headers=headers).status_code == 201
        call_id = call_with_turns(client, runtime_headers, did)
        [delivery] = receiver.wait_for(1)
    body = delivery.json()
    assert body["event"] == "call.analyzed"
    assert body["data"] == {
        "callId": call_id,
        "agentId": agent_id,
        "agentVersion": 1,
        **analysed(client, headers, call_id),
    }


def test_successful_filter(client, headers, runtime_headers, agent_id, did, fake_gemini):
    yes = call_with_turns(client, runtime_headers, did)
    analysed(client, headers, yes)
    fake_gemini.override = {"successful": False}
    no = call_with_turns(client, runtime_headers, did)
    analysed(client, headers, no)
    call_with_turns(client, runtime_headers, did, turns=[])  # not analysed: in neither
    for value, expected in (("true", [yes]), ("false", [no])):
        listed = client.get(f"/api/v1/calls?successful={value}", headers=headers).json
        assert [call["id"] for call in listed["calls"]] == expected
        assert [call["successful"] for call in listed["calls"]] == [value == "true"]
        assert listed["pagination"]["total"] == 1


def test_stats_give_each_versions_success_rate(
    client, headers, runtime_headers, agent_id, did, fake_gemini
):
    for successful in (True, False):  # version 1: one of two
        fake_gemini.override = {"successful": successful}
        analysed(client, headers, call_with_turns(client, runtime_headers, did))
    set_plan(client, headers, agent_id, {"summary": False})  # version 2: three of three
    fake_gemini.override = {"successful": True}
    for _ in range(3):
        analysed(client, headers, call_with_turns(client, runtime_headers, did))
    call_with_turns(client, runtime_headers, did, turns=[])  # a call not analysed
    stats = client.get(f"/api/v1/agents/{agent_id}/stats", headers=headers).json
    rates = [
        {key: row[key] for key in ("version", "calls", "billedMinutes", "analyzedCalls")}
        | {"successfulCalls": row["successfulCalls"], "successRate": row["successRate"]}
        for row in stats["versions"]
    ]
    assert rates == [
        {
            "version": 2,
            "calls": 4,
            "billedMinutes": 8,
            "analyzedCalls": 3,
            "successfulCalls": 3,
            "successRate": 1.0,
        },
        {
            "version": 1,
            "calls": 2,
            "billedMinutes": 4,
            "analyzedCalls": 2,
            "successfulCalls": 1,
            "successRate": 0.5,
        },
    ]


def test_usage_shows_the_analysis_cost_as_its_own_line(
    client, headers, runtime_headers, agent_id, did, fake_gemini
):
    for _ in range(2):
        analysed(client, headers, call_with_turns(client, runtime_headers, did))
    usage = client.get("/api/v1/usage", headers=headers).json
    assert usage["analysisCostIdr"] == 26
    assert usage["aiCostIdr"] == 2400  # the calls' own, without the analyses'


def test_a_tenants_burst_waits_for_its_places_and_not_others(
    app, client, headers, runtime_headers, agent_id, did, fake_gemini
):
    """A tenant whose analyses hold all its places: its next one waits (scheduled again),
    another tenant's goes at once; when a place frees, the waiting one is done too."""
    other = tenant_service.create_tenant(actor=ACTOR, name="globex", plan="business")
    held = [f"held{n}" for n in range(call_analysis.tenant_places(app.config))]
    first = call_with_turns(client, runtime_headers, did)
    analysed(client, headers, first)
    tenant_id = Call.get_by_id(first).tenant_id
    for member in held:
        assert queue.take_place(f"analysis:{tenant_id}", member, places=len(held), seconds=30)
    busy = call_with_turns(client, runtime_headers, did)
    other_call = other_tenant_call(client, runtime_headers, other)
    other_key = other_headers_for(other)
    assert analysed(client, other_key, other_call)["status"] == "done"
    shown = client.get(f"/api/v1/calls/{busy}", headers=headers).json["analysis"]
    assert shown["status"] == "pending"
    for member in held:
        queue.give_back_place(f"analysis:{tenant_id}", member)
    assert analysed(client, headers, busy)["status"] == "done"


def other_tenant_call(client, runtime_headers, other):
    agent = agent_service.create_agent(
        tenant=other, actor=ACTOR, name="Desk", system_prompt="Help."
    )
    number = number_service.add_number(
        actor=ACTOR, tenant=other, display_number="+6221555099", label="Other"
    )
    number_service.assign_agent(actor=ACTOR, tenant=other, number_id=number.id, agent_id=agent.id)
    billing.grant(actor=ACTOR, tenant=other, minutes=100)
    return call_with_turns(client, runtime_headers, "+6221555099")


def other_headers_for(other):
    return {"x-api-key": key_service.create_key(actor=ACTOR, tenant=other, name="k")[1]}
