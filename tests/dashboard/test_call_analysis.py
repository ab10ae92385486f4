"""A call's post-call analysis in the dashboard, analysed by the Gemini stand-in on 127.0.0.1:
the call's page shows it and runs it again (Run again, as POST /calls/:id/analyze), the
calls list filters on its verdict, the agent's Calls tab gives each version's success rate,
and Usage its cost."""

import re

import pytest

from app.models import AuditEntry, Call
from app.util import utcnow
from tests.dashboard.conftest import csrf_token, sign_in
from tests.fake_gemini import API_KEY
from tests.resources.test_call_analysis import analysed, call_with_turns, set_plan
from tests.test_isolation import make_call, snapshot

AGENTS = "/dashboard/agents"
PLAN = {
    "summary": True,
    "fields": [
        {"name": "booked", "type": "boolean", "required": True},
        {"name": "treatment", "type": "enum", "choices": ["scaling", "tambal"]},
    ],
    "successCriteria": "An appointment was booked.",
}


@pytest.fixture
def app_config(app_config):
    return {**app_config, "GEMINI_API_KEY": API_KEY}


def text(response) -> str:
    return response.get_data(as_text=True)


def analysis_section(body: str) -> str:
    start_at = body.index('<h2 id="analysis">')
    return body[start_at : body.index("<h2", start_at + 1)]


def field_rows(section: str) -> list[tuple[str, str]]:
    return re.findall(r'<th scope="row"><code>(\w+)</code></th><td>(.*?)</td>', section)


def test_the_call_page_shows_the_analysis_and_runs_it_again(
    signed_in, post, headers, runtime_headers, agent_id, did, fake_gemini
):
    version = set_plan(signed_in, headers, agent_id, PLAN)
    call_id = call_with_turns(signed_in, runtime_headers, did)
    first = analysed(signed_in, headers, call_id)
    page = f"/dashboard/calls/{call_id}"
    section = analysis_section(text(signed_in.get(page)))
    assert '<span class="ok">Yes</span>: successReason from the call' in section
    assert "summary from the call" in section
    assert f">the analysis plan of version {version}</a>" in section
    assert "<dd>gemini-2.5-flash</dd>" in section
    assert f"IDR {first['costIdr']:,} <span" in section
    assert field_rows(section) == [("booked", "yes"), ("treatment", "scaling")]

    # The plan gains a field on the Analysis tab; Run again analyses the call with it.
    form = {
        "summary": "true",
        "successCriteria": PLAN["successCriteria"],
        "fields-0-name": "booked",
        "fields-0-type": "boolean",
        "fields-0-required": "true",
        "fields-1-name": "treatment",
        "fields-1-type": "enum",
        "fields-1-choices": "scaling, tambal",
        "fields-2-name": "patientName",
        "fields-2-type": "string",
    }
    assert post(f"{AGENTS}/{agent_id}/analysis", form).status_code == 302
    response = post(f"{page}/analyze", token_from=page)
    assert response.status_code == 302
    assert response.headers["Location"] == f"{page}#analysis"
    again = analysed(signed_in, headers, call_id)
    assert again["planVersion"] == version + 1
    section = analysis_section(text(signed_in.get(page)))
    assert ("patientName", "patientName from the call") in field_rows(section)
    entry = AuditEntry.get(AuditEntry.action == "call.analysis_requested")
    assert (entry.target_id, entry.actor_label) == (call_id, "owner@acme.test")


def test_a_pending_and_a_failed_analysis_say_so(
    signed_in, headers, runtime_headers, did, fake_gemini
):
    for _ in range(3):
        fake_gemini.then("status", 500)
    call_id = call_with_turns(signed_in, runtime_headers, did)
    failed = analysed(signed_in, headers, call_id)
    assert failed["status"] == "failed"
    section = analysis_section(text(signed_in.get(f"/dashboard/calls/{call_id}")))
    assert "The analysis failed: Gemini answered HTTP 500." in section
    assert ">Run again</button>" in section


def test_run_again_on_another_tenants_call_is_404_and_changes_nothing(
    signed_in, client, other_headers, other_tenant, fake_gemini
):
    theirs = {"name": "Globex desk", "systemPrompt": "Theirs."}
    other_agent = client.post("/api/v1/agents", json=theirs, headers=other_headers).json["id"]
    call_id = make_call({"tenant": other_tenant, "agent_id": other_agent})
    # Ended, with its conversation: a call its own tenant could analyse again.
    Call.update(status="ended", ended_at=utcnow()).where(Call.id == call_id).execute()
    token = csrf_token(signed_in.get("/dashboard/"))
    before = snapshot()
    response = signed_in.post(f"/dashboard/calls/{call_id}/analyze", data={"csrf_token": token})
    assert response.status_code == 404
    assert response.content_type.startswith("text/html")
    assert snapshot() == before
    assert Call.get_by_id(call_id).analysis is None
    assert not fake_gemini.requests


def test_run_again_on_a_call_without_a_conversation_says_why(
    signed_in, post, runtime_headers, did, fake_gemini
):
    call_id = call_with_turns(signed_in, runtime_headers, did, turns=[])
    page = f"/dashboard/calls/{call_id}"
    assert ">Run again</button>" not in text(signed_in.get(page))
    response = post(f"{page}/analyze", token_from=page)
    assert response.status_code == 409
    assert "The call has no transcript turns to analyse." in text(response)
    assert "<h1>Call " in text(response)


def test_a_viewer_sees_the_analysis_without_run_again(
    client, viewer, runtime_headers, did, fake_gemini, headers
):
    call_id = call_with_turns(client, runtime_headers, did)
    analysed(client, headers, call_id)
    sign_in(client, viewer.email)
    page = f"/dashboard/calls/{call_id}"
    section = analysis_section(text(client.get(page)))
    assert "<dt>Successful</dt>" in section and "Run again" not in section
    token = csrf_token(client.get("/dashboard/"))
    assert client.post(f"{page}/analyze", data={"csrf_token": token}).status_code == 403


def test_the_calls_list_filters_on_the_verdict_and_the_calls_tab_gives_success_rates(
    signed_in, headers, runtime_headers, agent_id, did, fake_gemini
):
    yes = call_with_turns(signed_in, runtime_headers, did)
    analysed(signed_in, headers, yes)
    fake_gemini.override = {"successful": False}
    no = call_with_turns(signed_in, runtime_headers, did)
    analysed(signed_in, headers, no)
    unanalysed = call_with_turns(signed_in, runtime_headers, did, turns=[])
    for value, listed, left_out in (("true", yes, no), ("false", no, yes)):
        body = text(signed_in.get(f"/dashboard/calls?successful={value}"))
        assert f"/dashboard/calls/{listed}" in body
        assert f"/dashboard/calls/{left_out}" not in body
        assert f"/dashboard/calls/{unanalysed}" not in body
        assert f'<option value="{value}" selected>' in body
    refused = signed_in.get("/dashboard/calls?successful=maybe")
    assert refused.status_code == 422
    assert 'id="successful-error"' in text(refused)

    tab = text(signed_in.get(f"{AGENTS}/{agent_id}/calls"))
    assert '<th scope="col" class="number">Success rate</th>' in tab
    assert re.search(r"50%\s*<span class=\"muted small\">\(1 of 2 analysed\)</span>", tab)


def test_usage_shows_the_analysis_cost(signed_in, headers, runtime_headers, did, fake_gemini):
    call_id = call_with_turns(signed_in, runtime_headers, did)
    cost = analysed(signed_in, headers, call_id)["costIdr"]
    assert cost > 0
    body = text(signed_in.get("/dashboard/usage"))
    assert re.search(rf"<dt>Analysis cost in [^<]+</dt><dd>IDR {cost:,}</dd>", body)
