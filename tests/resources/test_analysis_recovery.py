"""Post-call analysis loses nothing and doubles nothing: a job lost with Redis (down when the
call ended) is asked for again by the sweep, the tenants' in turn; a run overtaken by a later
request drops its answer and emits no call.analyzed."""

import socket
import time

import pytest

from app import jobs
from app.models import Call, Event
from app.services import tenants as tenant_service
from app.services.calls import analysis as call_analysis
from tests.call_flow import RUNTIME, answer, end, start
from tests.fake_gemini import API_KEY
from tests.helpers import ACTOR
from tests.resources.test_call_analysis import (
    TURNS,
    analysed,
    call_with_turns,
    other_tenant_call,
    set_plan,
)


@pytest.fixture
def app_config(app_config):
    return {**app_config, "GEMINI_API_KEY": API_KEY}


def redis_down(app):
    """Point the queue at a port nothing listens on: every enqueue fails, as in an outage."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app.config.update(QUEUE_MODE="rq", REDIS_URL=f"redis://127.0.0.1:{port}/0")


def redis_back(app):
    app.config.update(QUEUE_MODE="inline", REDIS_URL=None)


def ended_in_outage(app, client, runtime_headers, did):
    """A call with turns that ended while the queue could not take its analysis job."""
    call_id = start(client, runtime_headers, did).json["id"]
    assert answer(client, runtime_headers, call_id).status_code == 200
    posted = client.post(
        f"{RUNTIME}/{call_id}/transcript", json={"turns": TURNS}, headers=runtime_headers
    )
    assert posted.status_code == 200, posted.json
    redis_down(app)
    try:
        assert end(client, runtime_headers, call_id).status_code == 200
    finally:
        redis_back(app)
    return call_id


def analyzed_events(call_id):
    return [
        event
        for event in Event.select().where(Event.type == "call.analyzed")
        if event.data["callId"] == call_id
    ]


def test_a_job_lost_in_an_outage_is_asked_for_again_by_the_sweep(
    app, client, headers, runtime_headers, agent_id, did, fake_gemini
):
    call_id = ended_in_outage(app, client, runtime_headers, did)
    shown = client.get(f"/api/v1/calls/{call_id}", headers=headers).json["analysis"]
    assert shown["status"] == "pending"
    lost = Call.get_by_id(call_id).analysis_requested_at
    jobs.sweep()  # pending for less than ANALYSIS_STALE_SECONDS: its job may be retrying
    assert fake_gemini.requests == []
    assert Call.get_by_id(call_id).analysis_requested_at == lost
    app.config["ANALYSIS_STALE_SECONDS"] = 0
    jobs.sweep()
    result = analysed(client, headers, call_id)
    assert (result["status"], result["planVersion"]) == ("done", 1)
    # The lost job, had it run after all, stores nothing: the sweep made a new request.
    late = call_analysis.run(call_id=call_id, requested=call_analysis.token(lost))
    assert late == "superseded"
    jobs.sweep()  # done: nothing to ask for again
    assert len(fake_gemini.requests) == 1
    assert len(analyzed_events(call_id)) == 1


def test_the_sweep_is_bounded_and_takes_the_tenants_in_turn(
    app, client, headers, runtime_headers, agent_id, did, fake_gemini
):
    ours = [ended_in_outage(app, client, runtime_headers, did) for _ in range(3)]
    other = tenant_service.create_tenant(actor=ACTOR, name="globex", plan="business")
    redis_down(app)
    try:
        theirs = other_tenant_call(client, runtime_headers, other)
    finally:
        redis_back(app)
    app.config.update(ANALYSIS_STALE_SECONDS=0, ANALYSIS_SWEEP_BATCH=2)
    assert call_analysis.requeue_stale() == 2
    statuses = {call.id: call.analysis_status for call in Call.select()}
    # Our oldest and theirs, though ours are three and older.
    assert [statuses[call_id] for call_id in ours] == ["done", "pending", "pending"]
    assert statuses[theirs] == "done"
    assert call_analysis.requeue_stale() == 2
    assert call_analysis.requeue_stale() == 0
    assert {call.analysis_status for call in Call.select()} == {"done"}
    assert len(fake_gemini.requests) == 4


def test_the_sweep_leaves_a_lost_analysis_pending_while_redis_is_still_down(
    app, client, headers, runtime_headers, agent_id, did, fake_gemini
):
    call_id = ended_in_outage(app, client, runtime_headers, did)
    lost = Call.get_by_id(call_id).analysis_requested_at
    app.config["ANALYSIS_STALE_SECONDS"] = 0
    redis_down(app)
    try:
        assert call_analysis.requeue_stale() == 0
    finally:
        redis_back(app)
    # As it was, so the next sweep asks for it at once.
    assert Call.get_by_id(call_id).analysis_requested_at == lost
    assert call_analysis.requeue_stale() == 1
    assert analysed(client, headers, call_id)["status"] == "done"


def test_a_run_overtaken_by_a_reanalysis_drops_its_late_answer(
    client, headers, runtime_headers, agent_id, did, fake_gemini
):
    """The first run's answer comes after POST /analyze asked again with a new plan: it is
    not stored and emits nothing; the later request's answer is the call's analysis."""
    fake_gemini.then("slow", 1.0)
    call_id = call_with_turns(client, runtime_headers, did)
    fake_gemini.wait_for(1)  # the first run waits on its answer
    version = set_plan(
        client,
        headers,
        agent_id,
        {"fields": [{"name": "interest", "type": "enum", "choices": ["high", "low"]}]},
    )
    response = client.post(f"/api/v1/calls/{call_id}/analyze", headers=headers)
    assert response.status_code == 202, response.json
    assert response.json["analysis"]["planVersion"] == version
    first, second = fake_gemini.wait_for(2)
    # The first run asked with the plan of version 1 (no fields): its answer was dropped.
    first_schema = first.json()["generationConfig"]["responseSchema"]
    assert "fields" not in first_schema["properties"]
    assert "fields" in second.json()["generationConfig"]["responseSchema"]["properties"]
    result = analysed(client, headers, call_id)
    assert (result["fields"], result["planVersion"]) == ({"interest": "high"}, version)
    time.sleep(0.2)  # nothing comes after
    [event] = analyzed_events(call_id)
    assert event.data["planVersion"] == version
    assert Call.get_by_id(call_id).analysis["planVersion"] == version


def test_a_stale_request_stores_nothing_and_a_done_one_is_not_stored_twice(
    client, headers, runtime_headers, agent_id, did, fake_gemini
):
    call_id = call_with_turns(client, runtime_headers, did)
    analysed(client, headers, call_id)
    first = call_analysis.token(Call.get_by_id(call_id).analysis_requested_at)
    # The same request's job run twice (a worker that died after storing): the second stops.
    assert call_analysis.run(call_id=call_id, requested=first) == "superseded"
    client.post(f"/api/v1/calls/{call_id}/analyze", headers=headers)
    analysed(client, headers, call_id)
    assert call_analysis.token(Call.get_by_id(call_id).analysis_requested_at) != first
    assert call_analysis.run(call_id=call_id, requested=first) == "superseded"
    assert len(fake_gemini.requests) == 2
    assert len(analyzed_events(call_id)) == 2
