"""A call reported by the runtime, seen in a real browser: on Calls, in its detail with its
events, the function the AI called and its conversation, and on Credits as the usage it was
charged."""

import json
import re

import pytest
import requests
from playwright.sync_api import Page, expect

from tests.call_flow import CALLER, RUNTIME, backdate, end_body
from tests.receiver import Answer, Receiver
from tests.system.browser.conftest import headed_row, heading, menu, row

SLOTS = {"slots": ["10:00", "14:30"]}


@pytest.fixture
def crm():
    """The tenant's system the agent's function calls: answers free slots, as JSON."""
    with Receiver(lambda request: Answer(body=json.dumps(SLOTS).encode())) as receiver:
        yield receiver


@pytest.fixture
def function(client, headers, agent_id, crm):
    """check_availability, a function of the agent on crm, defined through the tenant API."""
    response = client.post(
        f"/api/v1/agents/{agent_id}/functions",
        json={
            "name": "check_availability",
            "description": "Free appointment slots on a date.",
            "endpoint": f"{crm.url}/availability",
            "parameters": {
                "type": "object",
                "properties": {"date": {"type": "string", "description": "YYYY-MM-DD"}},
                "required": ["date"],
            },
        },
        headers=headers,
    )
    assert response.status_code == 201, response.get_data(as_text=True)
    return response.json["name"]


@pytest.fixture
def call_id(server, did, runtime_headers, function, crm):
    """A whole call through the server's runtime API: started, answered, one function call
    (check_availability on the crm), ended after 95 s (2 minutes charged)."""

    def runtime(path, **body):
        response = requests.post(
            f"{server}{RUNTIME}{path}", json=body, headers=runtime_headers, timeout=10
        )
        assert response.ok, response.text
        return response.json()

    call = runtime("", did=did, callerNumber=CALLER)
    runtime(f"/{call['id']}/answered")
    answer = runtime(
        f"/{call['id']}/function-calls", functionName=function, parameters={"date": "2026-11-23"}
    )
    assert answer == {"result": SLOTS}
    assert crm.wait_for(1)[0].json()["parameters"] == {"date": "2026-11-23"}
    backdate(call["id"], 95)  # it lived as long as its end reports
    runtime(f"/{call['id']}/ended", **end_body(durationSeconds=95))
    return call["id"]


def follow_menu(page: Page, name: str) -> None:
    menu(page).get_by_role("link", name=name).click()
    expect(heading(page)).to_have_text(name)


def test_a_call_shows_on_calls_with_its_detail_and_on_credits(page, shot, signed_in, call_id):
    signed_in("viewer")
    follow_menu(page, "Calls")
    call = row(page, CALLER)
    expect(call).to_contain_text("ended")
    expect(call).to_contain_text("Reception")
    expect(call).to_contain_text("1:35")
    expect(call.get_by_role("cell", name="normal", exact=True)).to_be_visible()
    expect(call.get_by_role("cell", name="IDR 1,200", exact=True)).to_be_visible()
    # Every column fits at 1,280 px: the table needs no scrolling sideways.
    assert page.locator(".scrolls").evaluate("e => e.scrollWidth <= e.clientWidth")
    shot("calls")

    call.get_by_role("link", name=re.compile("^Details of the call")).click()
    expect(heading(page)).to_have_text(f"Call {call_id}")
    for event in ("call.started", "call.answered", "function.called", "call.ended"):
        expect(page.get_by_role("cell", name=re.compile(rf"^{re.escape(event)}\b"))).to_be_visible()
    invocation = row(page, "succeeded")
    expect(invocation).to_contain_text("check_availability")
    expect(invocation).to_contain_text("200")
    expect(invocation).to_contain_text(re.compile(r"\b\d+ ms\b"))
    expect(invocation).to_contain_text('"slots": ["10:00", "14:30"]')
    shot("call-detail")

    follow_menu(page, "Credits")
    usage = row(page, "usage")
    expect(usage).to_contain_text("-2")
    expect(usage).to_contain_text(f"Call {call_id}: 2 minutes")
    shot("credits")
    usage.get_by_role("link", name=call_id).click()
    expect(heading(page)).to_have_text(f"Call {call_id}")
    shot("call-from-credits")


TURNS = [
    {"role": "agent", "text": "Halo, klinik Sehat. Ada yang bisa dibantu?", "startMs": 0},
    {"role": "caller", "text": "Saya mau booking dokter gigi besok.", "startMs": 4200},
    {"role": "agent", "text": "Besok jam 10.00 tersedia. Saya catat?", "startMs": 9800},
]
RECORDING = "https://recordings.example.com/calls/17.wav"


@pytest.fixture
def transcribed_call(server, did, runtime_headers):
    """A call through the server's runtime API whose runtime posted its conversation in two
    parts as it went, and ended with the recording's address and its cost by component."""

    def runtime(path, **body):
        response = requests.post(
            f"{server}{RUNTIME}{path}", json=body, headers=runtime_headers, timeout=10
        )
        assert response.ok, response.text
        return response.json()

    call = runtime("", did=did, callerNumber=CALLER)
    runtime(f"/{call['id']}/answered")
    runtime(f"/{call['id']}/transcript", turns=TURNS[:2])
    runtime(f"/{call['id']}/transcript", turns=TURNS[2:], transcriptSummary="Booked a dentist.")
    ended = {**end_body(), "recordingUrl": RECORDING}
    ended["costBreakdown"] = {"llm": 800, "stt": 200, "tts": 150, "telephony": 50}
    del ended["aiCostIdr"]
    backdate(call["id"], ended["durationSeconds"])  # it lived as long as its end reports
    runtime(f"/{call['id']}/ended", **ended)
    return call["id"]


def test_a_calls_page_shows_its_conversation_recording_and_costs(
    page, shot, signed_in, transcribed_call
):
    signed_in("viewer")
    follow_menu(page, "Calls")
    shot("calls")
    row(page, CALLER).get_by_role("link", name=re.compile("^Details of the call")).click()
    expect(heading(page)).to_have_text(f"Call {transcribed_call}")
    conversation = page.get_by_role("table").filter(
        has=page.get_by_role("columnheader", name="What was said")
    )
    turns = conversation.get_by_role("row")
    expect(turns).to_have_count(4)  # the header and three turns, in order
    expect(turns.nth(1)).to_contain_text("0:00")
    expect(turns.nth(1)).to_contain_text("Agent")
    expect(turns.nth(1)).to_contain_text(TURNS[0]["text"])
    expect(turns.nth(2)).to_contain_text("0:04")
    expect(turns.nth(2)).to_contain_text("Caller")
    expect(turns.nth(2)).to_contain_text(TURNS[1]["text"])
    expect(turns.nth(3)).to_contain_text(TURNS[2]["text"])
    expect(page.get_by_role("heading", name="Conversation")).to_be_visible()
    recording = page.get_by_role("link", name="Listen to the recording")
    expect(recording).to_have_attribute("href", RECORDING)
    expect(headed_row(page, "Language model")).to_contain_text("800")
    expect(headed_row(page, "Total")).to_contain_text("1,200")
    expect(page.get_by_text("Booked a dentist.")).to_be_visible()
    shot("call-with-conversation")
