"""Post-call analysis in a real browser: an agent's Analysis tab, whose preview follows the
plan as it is typed and whose Save makes the next version; and a call's analysis on its page,
with Run again."""

import json
import re
import time

import pytest
import requests
from playwright.sync_api import Page, expect

from tests.call_flow import CALLER, RUNTIME, backdate, end_body
from tests.fake_gemini import API_KEY
from tests.system.browser.conftest import headed_row, heading, menu, row

TURNS = [
    {"role": "agent", "text": "Klinik Gigi Senyum, ada yang bisa dibantu?"},
    {"role": "caller", "text": "Saya mau scaling hari Kamis jam 10."},
    {"role": "agent", "text": "Baik, Kamis jam 10.00 untuk scaling sudah saya catat."},
]
PLAN = {
    "summary": True,
    "fields": [
        {"name": "booked", "type": "boolean", "required": True},
        {"name": "treatment", "type": "enum", "choices": ["scaling", "tambal"]},
    ],
    "successCriteria": "An appointment was booked.",
}


@pytest.fixture
def server_settings(fake_gemini):
    """The server analyses calls with the Gemini stand-in on 127.0.0.1."""
    return {"GEMINI_API_KEY": API_KEY, "GEMINI_API_URL": fake_gemini.url}


def preview_of(page: Page) -> dict:
    return json.loads(page.locator("#analysis-preview").text_content() or "")


def field_row(page: Page, number: int):
    return page.get_by_role("group", name=f"Field {number}", exact=True)


def test_the_plan_editor_previews_and_saves_the_plan(
    page, shot, signed_in, client, headers, agent_id
):
    signed_in("owner")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Agents").click()
    expect(heading(page)).to_have_text("Agents")
    shot("agents")
    page.get_by_role("link", name="Reception", exact=True).click()
    expect(heading(page)).to_have_text("Reception")
    shot("agent")
    page.get_by_role("navigation", name="Agent").get_by_role("link", name="Analysis").click()
    expect(page).to_have_title("Analysis · Agent Reception · Voice Agent dashboard")
    shot("analysis")
    assert preview_of(page)["fields"] == {}

    # Add two fields on the page (the script), and watch the preview follow.
    page.get_by_role("button", name="Add field").click()
    first = field_row(page, 1)
    first.get_by_label("Name").fill("booked")
    first.get_by_label("Type").select_option("boolean")
    first.get_by_label("Description").fill("Whether an appointment was booked.")
    first.get_by_label("Required").check()
    expect(page.locator("#analysis-preview")).to_contain_text('"booked": true')
    page.get_by_role("button", name="Add field").click()
    second = field_row(page, 2)
    second.get_by_label("Name").fill("treatment")
    second.get_by_label("Type").select_option("enum")
    second.get_by_label("Choices").fill("scaling, tambal, cabut")
    expect(page.locator("#analysis-preview")).to_contain_text('"treatment": "scaling"')
    page.get_by_label("Summary").uncheck()
    page.get_by_label("Success criteria").fill("An appointment was booked.")
    expect(page.locator("#analysis-preview")).to_contain_text('"summary": null')
    shown = preview_of(page)
    assert shown["fields"] == {"booked": True, "treatment": "scaling"}
    assert shown["successful"] is True

    # A field without choices: the message beside its input, on the tab.
    second.get_by_label("Choices").fill("")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("An enum field needs choices")).to_be_visible()
    expect(page).to_have_title("Analysis · Agent Reception · Voice Agent dashboard")
    shot("invalid")
    field_row(page, 2).get_by_label("Choices").fill("scaling, tambal, cabut")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_have_text("Analysis plan saved.")
    shot("saved")
    # The server's preview of the saved plan is what the script shows.
    assert preview_of(page)["fields"] == {"booked": True, "treatment": "scaling"}

    agent = client.get(f"/api/v1/agents/{agent_id}", headers=headers).json
    assert agent["version"] == 2
    assert agent["analysisPlan"] == {
        "summary": False,
        "fields": [
            {"name": "booked", "type": "boolean", "required": True,
             "description": "Whether an appointment was booked."},
            {"name": "treatment", "type": "enum", "choices": ["scaling", "tambal", "cabut"],
             "required": False, "description": ""},
        ],
        "successCriteria": "An appointment was booked.",
    }  # fmt: skip

    # Remove one: the preview drops it at once, and Save keeps the other.
    field_row(page, 1).get_by_label("Remove this field").check()
    expect(page.locator("#analysis-preview")).not_to_contain_text('"booked"')
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_have_text("Analysis plan saved.")
    shot("removed")
    plan = client.get(f"/api/v1/agents/{agent_id}", headers=headers).json["analysisPlan"]
    assert [field["name"] for field in plan["fields"]] == ["treatment"]


def analysed(client, headers, call_id: str, planned: int) -> dict:
    """The call's analysis once it is done with the plan of version planned."""
    deadline = time.monotonic() + 10
    while True:
        found = client.get(f"/api/v1/calls/{call_id}", headers=headers).json["analysis"]
        if found and found["status"] == "done" and found["planVersion"] == planned:
            return found
        assert time.monotonic() < deadline, found
        time.sleep(0.05)


def test_a_calls_analysis_on_its_page_and_run_again(
    page, shot, signed_in, server, client, headers, runtime_headers, agent_id, did
):
    patched = client.patch(
        f"/api/v1/agents/{agent_id}", json={"analysisPlan": PLAN}, headers=headers
    )
    assert patched.status_code == 200

    def runtime(path, **body):
        response = requests.post(
            f"{server}{RUNTIME}{path}", json=body, headers=runtime_headers, timeout=10
        )
        assert response.ok, response.text
        return response.json()

    call_id = runtime("", did=did, callerNumber=CALLER)["id"]
    runtime(f"/{call_id}/answered")
    runtime(f"/{call_id}/transcript", turns=TURNS)
    backdate(call_id, end_body()["durationSeconds"])
    runtime(f"/{call_id}/ended", **end_body())
    analysed(client, headers, call_id, planned=2)

    signed_in("owner")
    menu(page).get_by_role("link", name="Calls").click()
    expect(heading(page)).to_have_text("Calls")
    shot("calls")
    page.get_by_label("Successful").select_option("Yes")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_label("Successful")).to_have_value("true")
    shot("successful-calls")
    row(page, CALLER).get_by_role("link", name=re.compile("^Details of the call")).click()
    expect(heading(page)).to_have_text(f"Call {call_id}")
    section = page.locator("#analysis ~ dl.fields").first
    expect(section).to_contain_text("Yes: successReason from the call")
    expect(section).to_contain_text("summary from the call")
    expect(section).to_contain_text("gemini-2.5-flash")
    expect(page.get_by_role("table", name="Analysis fields")).to_be_visible()
    expect(headed_row(page, "booked")).to_contain_text("yes")
    expect(headed_row(page, "treatment")).to_contain_text("scaling")
    shot("call-analysis")

    # The plan gains a field; Run again analyses the call with it.
    plan = {**PLAN, "fields": [*PLAN["fields"], {"name": "patientName", "type": "string"}]}
    patched = client.patch(
        f"/api/v1/agents/{agent_id}", json={"analysisPlan": plan}, headers=headers
    )
    assert patched.status_code == 200
    page.get_by_role("button", name="Run again").click()
    expect(page.get_by_role("status")).to_have_text(
        "The call is being analysed again (reload the page to see the outcome)."
    )
    shot("run-again")
    analysed(client, headers, call_id, planned=3)
    page.reload()
    expect(headed_row(page, "patientName")).to_contain_text("patientName from the call")
    expect(page.get_by_role("link", name="the analysis plan of version 3")).to_be_visible()
    shot("analysed-again")
