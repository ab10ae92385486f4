"""Post-call analysis in the dashboard: an agent's Analysis tab (the plan, validated as the
API validates it, saved as the agent's next version, with its preview), and a call's
analysis on its page."""

import json
import re

import pytest

from app.dashboard.analysis import example_analysis
from app.models import Call
from app.services import analysis as analysis_service
from tests.dashboard.conftest import csrf_token, sign_in
from tests.resources.test_call_analysis import analysed, call_with_turns
from tests.test_isolation import snapshot

AGENTS = "/dashboard/agents"
# The dental clinic's plan, as its form sends it.
DENTAL_FORM = {
    "summary": ["true", "false"],
    "successCriteria": "An appointment was booked and confirmed.",
    "fields-0-name": "booked",
    "fields-0-type": "boolean",
    "fields-0-description": "Whether an appointment was booked.",
    "fields-0-required": ["true", "false"],
    "fields-0-remove": "false",
    "fields-1-name": "treatment",
    "fields-1-type": "enum",
    "fields-1-description": "The treatment booked.",
    "fields-1-choices": "scaling, tambal , cabut",
    "fields-1-required": "false",
    "fields-1-remove": "false",
    "fields-2-name": "appointmentDate",
    "fields-2-type": "string",
    "fields-2-description": "The date booked, YYYY-MM-DD.",
    "fields-2-required": "false",
    "fields-2-remove": "false",
}
DENTAL_PLAN = {
    "summary": True,
    "fields": [
        {
            "name": "booked",
            "type": "boolean",
            "description": "Whether an appointment was booked.",
            "required": True,
        },
        {
            "name": "treatment",
            "type": "enum",
            "description": "The treatment booked.",
            "choices": ["scaling", "tambal", "cabut"],
            "required": False,
        },
        {
            "name": "appointmentDate",
            "type": "string",
            "description": "The date booked, YYYY-MM-DD.",
            "required": False,
        },
    ],
    "successCriteria": "An appointment was booked and confirmed.",
}
TURNS = [
    {"role": "agent", "text": "Klinik Gigi Senyum, ada yang bisa dibantu?"},
    {"role": "caller", "text": "Saya mau scaling hari Kamis."},
]


def text(response) -> str:
    return response.get_data(as_text=True)


def preview(body: str) -> dict:
    match = re.search(r'<pre class="json" id="analysis-preview"[^>]*>(.*?)</pre>', body, re.S)
    assert match, "the tab has no preview"
    return json.loads(match.group(1).replace("&#34;", '"').replace("&quot;", '"'))


def plan_of(client, headers, agent_id) -> dict:
    return client.get(f"/api/v1/agents/{agent_id}", headers=headers).json["analysisPlan"]


def test_the_analysis_tab_shows_the_default_plan_and_its_preview(signed_in, agent_id, app):
    body = text(signed_in.get(f"{AGENTS}/{agent_id}/analysis"))
    assert "<title>Analysis · Agent Reception · Voice Agent dashboard</title>" in body
    assert re.search(r'id="summary" name="summary" value="true" checked', body)
    assert 'name="fields-0-name"' not in body  # no field yet, only the template's
    assert "No fields: the analysis has a summary and a verdict only." in body
    model = app.config.get("ANALYSIS_MODEL", "")
    assert preview(body) == example_analysis(analysis_service.DEFAULT_PLAN, model)
    assert preview(body)["summary"] and preview(body)["fields"] == {}
    # The script that keeps the preview in step with the form, from the service itself.
    assert '<script src="/dashboard/static/analysis.js" defer></script>' in body


def test_saving_the_plan_makes_the_next_version(signed_in, post, headers, agent_id):
    before = signed_in.get(f"/api/v1/agents/{agent_id}", headers=headers).json
    response = post(f"{AGENTS}/{agent_id}/analysis", DENTAL_FORM)
    assert response.status_code == 302
    assert response.headers["Location"] == f"{AGENTS}/{agent_id}/analysis"
    body = text(signed_in.get(response.headers["Location"]))
    assert "Analysis plan saved." in body
    after = signed_in.get(f"/api/v1/agents/{agent_id}", headers=headers).json
    assert after["analysisPlan"] == DENTAL_PLAN
    assert after["version"] == before["version"] + 1
    # The form shows the saved plan, and the preview its fields with example values.
    assert 'value="booked"' in body and 'value="scaling, tambal, cabut"' in body
    shown = preview(body)
    assert shown["fields"] == {"booked": True, "treatment": "scaling", "appointmentDate": "…"}
    assert shown["successful"] is True and shown["summary"]
    # The same form again changes nothing: no new version.
    again = post(f"{AGENTS}/{agent_id}/analysis", DENTAL_FORM)
    assert "Nothing to save" in text(signed_in.get(again.headers["Location"]))
    assert plan_of(signed_in, headers, agent_id) == DENTAL_PLAN
    assert (
        signed_in.get(f"/api/v1/agents/{agent_id}", headers=headers).json["version"]
        == (after["version"])
    )
    # The Versions tab names what changed.
    versions = text(signed_in.get(f"{AGENTS}/{agent_id}/versions"))
    assert "analysis plan" in versions


def test_a_field_ticked_remove_and_an_empty_row_are_not_saved(signed_in, post, headers, agent_id):
    form = {
        **DENTAL_FORM,
        "fields-1-remove": ["true", "false"],
        "fields-7-name": "",
        "fields-7-type": "string",
        "fields-7-description": "",
        "summary": "false",
        "successCriteria": "  ",
    }
    assert post(f"{AGENTS}/{agent_id}/analysis", form).status_code == 302
    plan = plan_of(signed_in, headers, agent_id)
    assert [field["name"] for field in plan["fields"]] == ["booked", "appointmentDate"]
    assert plan["summary"] is False and "successCriteria" not in plan


def test_add_field_shows_one_more_row_and_saves_nothing(signed_in, post, headers, agent_id):
    before = snapshot()
    response = post(f"{AGENTS}/{agent_id}/analysis", {**DENTAL_FORM, "add": "1"})
    assert response.status_code == 200
    body = text(response)
    for n in range(4):
        assert f'name="fields-{n}-name"' in body
    assert "<legend>Field 4</legend>" in body
    assert snapshot() == before


def test_a_plan_that_breaks_a_rule_shows_each_message_beside_its_input(
    signed_in, post, headers, agent_id
):
    form = {
        **DENTAL_FORM,
        "fields-1-choices": "",
        "fields-2-name": "booked",
        "successCriteria": "x" * 2001,
    }
    before = snapshot()
    response = post(f"{AGENTS}/{agent_id}/analysis", form)
    assert response.status_code == 422
    body = text(response)
    assert re.search(r'id="fields-1-choices-error">\s*<li>An enum field needs choices', body)
    assert re.search(r'id="fields-2-name-error">\s*<li>Another field is named booked', body)
    assert re.search(r'id="fields-2-name"[^>]*aria-invalid="true"', body)
    assert re.search(r'id="successCriteria-error">\s*<li>Must be text of at most 2,000', body)
    # The form keeps what was typed.
    assert 'value="treatment"' in body and "x" * 2001 in body
    assert snapshot() == before


def test_more_than_twenty_fields_is_refused(signed_in, post, agent_id):
    form = {"summary": "true"}
    for n in range(21):
        form |= {f"fields-{n}-name": f"f{n}", f"fields-{n}-type": "string"}
    response = post(f"{AGENTS}/{agent_id}/analysis", form)
    assert response.status_code == 422
    assert "At most 20 fields." in text(response)


def test_a_viewer_sees_the_plan_but_cannot_save_it(client, viewer, agent_id):
    sign_in(client, viewer.email)
    body = text(client.get(f"{AGENTS}/{agent_id}/analysis"))
    assert '<fieldset class="plain" disabled>' in body
    assert ">Save</button>" not in body and ">Add field</button>" not in body
    token = csrf_token(client.get("/dashboard/"))
    response = client.post(
        f"{AGENTS}/{agent_id}/analysis", data={**DENTAL_FORM, "csrf_token": token}
    )
    assert response.status_code == 403


def ended_call(client, headers, runtime_headers, did, turns=TURNS) -> str:
    """A call ended with turns, once its analysis job has run (no Gemini key here:
    not_configured), so that a test may set the analysis it shows."""
    call_id = call_with_turns(client, runtime_headers, did, turns=turns)
    if turns:
        assert analysed(client, headers, call_id)["status"] == "not_configured"
    return call_id


def analysis_section(body: str) -> str:
    start_at = body.index('<h2 id="analysis">')
    return body[start_at : body.index("<h2", start_at + 1)]


def test_the_call_page_shows_a_done_analysis(signed_in, headers, runtime_headers, did):
    call_id = ended_call(signed_in, headers, runtime_headers, did)
    done = {
        "status": "done",
        "summary": "Ibu Sari booked a scaling on Thursday.",
        "successful": True,
        "successReason": "A scaling was booked and confirmed.",
        "fields": {"booked": True, "treatment": "scaling", "appointmentDate": None},
        "model": "gemini-test",
        "analyzedAt": "2026-11-30T03:12:44.508Z",
        "costIdr": 1234,
    }
    Call.update(analysis=done).where(Call.id == call_id).execute()
    section = analysis_section(text(signed_in.get(f"/dashboard/calls/{call_id}")))
    assert '<span class="ok">Yes</span>: A scaling was booked and confirmed.' in section
    assert "Ibu Sari booked a scaling on Thursday." in section
    assert "<dd>gemini-test</dd>" in section
    assert "IDR 1,234" in section and "not taken from credit" in section
    assert "2026-11-30 03:12:44" in section
    rows = re.findall(r"<th scope=\"row\"><code>(\w+)</code></th><td>(.*?)</td>", section)
    assert rows == [("booked", "yes"), ("treatment", "scaling"), ("appointmentDate", "—")]
    assert ">Run again</button>" in section


@pytest.mark.parametrize(
    "analysis, shown",
    [
        ({"status": "failed", "reason": "Gemini answered 503 three times."},
         "The analysis failed: Gemini answered 503 three times."),
        ({"status": "not_configured"}, "analysis is not configured on this service"),
        ({"status": "done", "summary": None, "successful": False, "successReason": "No date.",
          "fields": {}, "model": "m", "analyzedAt": "2026-11-30T03:12:44.508Z", "costIdr": 0},
         '<span class="bad">No</span>: No date.'),
    ],
)  # fmt: skip
def test_the_call_page_says_why_there_is_no_analysis(
    signed_in, headers, runtime_headers, did, analysis, shown
):
    call_id = ended_call(signed_in, headers, runtime_headers, did)
    Call.update(analysis=analysis).where(Call.id == call_id).execute()
    assert shown in analysis_section(text(signed_in.get(f"/dashboard/calls/{call_id}")))


def test_a_call_without_a_conversation_has_no_run_again(signed_in, headers, runtime_headers, did):
    call_id = ended_call(signed_in, headers, runtime_headers, did, turns=[])
    section = analysis_section(text(signed_in.get(f"/dashboard/calls/{call_id}")))
    assert "Not analysed: the call has no conversation." in section
    assert "Run again" not in section
