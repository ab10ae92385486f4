"""An agent's tabs: Overview, Prompt, Functions, Analysis, Calls and Versions, each a page of
its own with its part of the agent, its forms returning to it, and another tenant's agent 404
on every one."""

import re
import secrets

import pytest

from app.models import Call, Function
from app.services import phone_numbers as number_service
from tests.dashboard.conftest import csrf_token
from tests.test_isolation import snapshot

AGENTS = "/dashboard/agents"
# Each tab: its path after the agent's, its name in the tab bar, and what only it shows.
TABS = {
    "": ("Overview", ['name="voiceId"', "<dt>Phone numbers</dt>", ">Delete agent</a>"]),
    "/prompt": ("Prompt", ['name="systemPrompt"', 'name="greetingText"', 'id="variables"']),
    "/functions": (
        "Functions",
        ['name="toolsEnabled"', "Tools are not functions", ">Add function</button>"],
    ),
    "/analysis": ("Analysis", ['name="successCriteria"', 'id="analysis-preview"']),
    "/calls": ("Calls", ["Calls by version, last 30 days", ">Call a number</button>"]),
    "/versions": ("Versions", ['<th scope="col">What changed</th>']),
}
FUNCTION = {
    "name": "book_slot",
    "description": "Books a slot.",
    "endpoint": "https://clinic.example.com/book",
    "method": "POST",
    "parameters": '{"type": "object", "properties": {}}',
}


def text(response) -> str:
    return response.get_data(as_text=True)


def tab_bar(body: str) -> str:
    match = re.search(r'<nav class="tabs" aria-label="Agent">(.*?)</nav>', body, re.S)
    assert match, "the page has the agent's tab bar"
    return match.group(1)


def current_tab(body: str) -> str:
    """The name of the tab the page marks as shown."""
    [current] = re.findall(r'aria-current="page">([^<]+)</a>', tab_bar(body))
    return current


@pytest.fixture
def number_id(did, tenant):
    (number,) = number_service.list_numbers(tenant=tenant)
    return number.id


@pytest.mark.parametrize("tab", TABS)
def test_each_tab_is_a_page_of_its_own_with_its_part(signed_in, agent_id, did, tab):
    response = signed_in.get(f"{AGENTS}/{agent_id}{tab}")
    assert response.status_code == 200
    body = text(response)
    name, shows = TABS[tab]
    assert "<h1>Reception</h1>" in body and body.count("<h1>") == 1
    assert current_tab(body) == name
    for marker in shows:
        assert marker in body, (tab, marker)
    for other, (_, elsewhere) in TABS.items():
        if other != tab:
            for marker in elsewhere:
                assert marker not in body, (tab, marker)
    # One tab bar, the same on every tab: each tab's own URL, in the same order.
    links = re.findall(r'<a href="([^"]+)"[^>]*>([^<]+)</a>', tab_bar(body))
    assert links == [(f"{AGENTS}/{agent_id}{path}", label) for path, (label, _) in TABS.items()]


def test_the_agent_pages_url_shows_the_overview(signed_in, agent_id, did):
    body = text(signed_in.get(f"{AGENTS}/{agent_id}"))
    assert current_tab(body) == "Overview"
    assert "<title>Agent Reception · Voice Agent dashboard</title>" in body
    assert re.search(rf"{re.escape(did)} \(Main\):\s*the latest version", body)
    assert f'href="{AGENTS}/{agent_id}/functions">0 functions</a>' in body
    prompt = text(signed_in.get(f"{AGENTS}/{agent_id}/prompt"))
    assert "<title>Prompt · Agent Reception · Voice Agent dashboard</title>" in prompt
    # The links of the other pages lead to it.
    for page in (AGENTS, "/dashboard/phone-numbers"):
        assert f'href="{AGENTS}/{agent_id}"' in text(signed_in.get(page)), page


@pytest.mark.parametrize(
    "path, form, back, flash, saved",
    [
        ("", {"language": "ms", "isActive": "false"}, "", "Agent saved.",
         {"language": "ms", "isActive": False}),
        ("/prompt", {"systemPrompt": "Greet {{name}}.", "greetingText": "Hi {{name}}."},
         "/prompt", "Prompt saved.",
         {"systemPrompt": "Greet {{name}}.", "greetingText": "Hi {{name}}."}),
        ("/tools", {"toolsEnabled": "end_call, transfer_call"}, "/functions",
         "Tools enabled saved.", {"toolsEnabled": ["end_call", "transfer_call"]}),
    ],
)  # fmt: skip
def test_each_tabs_form_saves_its_fields_and_returns_to_the_tab(
    signed_in, post, headers, agent_id, path, form, back, flash, saved
):
    before = signed_in.get(f"/api/v1/agents/{agent_id}", headers=headers).json
    response = post(f"{AGENTS}/{agent_id}{path}", form)
    assert response.status_code == 302
    assert response.headers["Location"] == f"{AGENTS}/{agent_id}{back}"
    assert flash in text(signed_in.get(response.headers["Location"]))
    after = signed_in.get(f"/api/v1/agents/{agent_id}", headers=headers).json
    moved = {*saved, "updatedAt", "version"}
    assert {key: after[key] for key in saved} == saved
    assert {k: v for k, v in after.items() if k not in moved} == {
        k: v for k, v in before.items() if k not in moved
    }


def test_a_tabs_form_saves_none_of_another_tabs_fields(signed_in, post, headers, agent_id):
    """Each form saves its own fields: another tab's sent along are not its to change."""
    everything = {"name": "Renamed", "systemPrompt": "Other.", "toolsEnabled": "end_call"}
    for path in ("", "/prompt", "/tools"):
        assert post(f"{AGENTS}/{agent_id}{path}", everything).status_code == 302
    agent = signed_in.get(f"/api/v1/agents/{agent_id}", headers=headers).json
    assert (agent["name"], agent["systemPrompt"], agent["toolsEnabled"]) == (
        "Renamed",
        "Other.",
        ["end_call"],
    )
    assert agent["version"] == 4  # one version each


@pytest.mark.parametrize(
    "path, form, tab, field, message, status",
    [
        ("", {"language": "English"}, "Overview", "language",
         "Must be a language tag such as id or en-US.", 422),
        ("/prompt", {"systemPrompt": ""}, "Prompt", "systemPrompt",
         "Use 1 to 20000 characters.", 422),
        ("/tools", {"toolsEnabled": "a, a"}, "Functions", "toolsEnabled",
         "Items must be unique.", 422),
        ("/functions", {**FUNCTION, "name": "9lives"}, "Functions", "function-name",
         "Letters, digits and _, not starting with a digit.", 422),
        ("/call", {"to": "0813"}, "Calls", "call-to",
         "Must be an international number such as +6281234567890.", 422),
    ],
)  # fmt: skip
def test_a_form_that_fails_shows_its_tab_again_with_the_message(
    signed_in, post, number_id, agent_id, path, form, tab, field, message, status
):
    before = snapshot()
    response = post(f"{AGENTS}/{agent_id}{path}", {"phoneNumberId": number_id, **form})
    assert response.status_code == status
    body = text(response)
    assert current_tab(body) == tab
    assert "<h1>Reception</h1>" in body
    assert re.search(rf'id="{field}-error">\s*<li>{re.escape(message)}</li>', body), body
    assert re.search(rf'id="{field}"[^>]*aria-invalid="true"', body)
    for marker in TABS[{"/tools": "/functions", "/call": "/calls"}.get(path, path)][1]:
        assert marker in body  # the rest of the tab is there too
    assert snapshot() == before


def test_a_function_added_shows_its_secret_on_the_functions_tab(signed_in, post, agent_id):
    form = {**FUNCTION, "form_id": secrets.token_urlsafe(16)}
    response = post(f"{AGENTS}/{agent_id}/functions", form)
    assert response.status_code == 201
    body = text(response)
    assert current_tab(body) == "Functions"
    assert f'readonly value="{Function.get().signing_secret}"' in body
    # The same form again (the page reloaded): nothing new, back on the tab.
    again = post(f"{AGENTS}/{agent_id}/functions", form)
    assert again.status_code == 302
    assert again.headers["Location"] == f"{AGENTS}/{agent_id}/functions"
    assert Function.select().count() == 1


def test_the_prompt_tab_lists_the_variables_of_the_saved_prompt(signed_in, headers, agent_id):
    fields = {"systemPrompt": "Call {{name}} about {{order}}.", "greetingText": "Hi {{name}}!"}
    signed_in.patch(f"/api/v1/agents/{agent_id}", json=fields, headers=headers)
    body = text(signed_in.get(f"{AGENTS}/{agent_id}/prompt"))
    rows = re.findall(r"<tr>\s*<td><code>(.*?)</code></td>\s*<td>(.*?)</td>", body)
    assert rows == [("{{name}}", "prompt and greeting"), ("{{order}}", "prompt")]
    signed_in.patch(f"/api/v1/agents/{agent_id}", json={"systemPrompt": "Hi."}, headers=headers)
    signed_in.patch(f"/api/v1/agents/{agent_id}", json={"greetingText": ""}, headers=headers)
    assert "have no placeholders" in text(signed_in.get(f"{AGENTS}/{agent_id}/prompt"))


def test_the_function_pages_lead_back_to_the_functions_tab(signed_in, post, agent_id):
    post(f"{AGENTS}/{agent_id}/functions", FUNCTION)
    back = f'<a href="{AGENTS}/{agent_id}/functions">← Functions of Reception</a>'
    for page in ("", "/test", "/delete"):
        body = text(signed_in.get(f"{AGENTS}/{agent_id}/functions/book_slot{page}"))
        assert back in body or f'href="{AGENTS}/{agent_id}/functions">Cancel</a>' in body, page


def test_another_tenants_agent_is_404_on_every_tab(
    signed_in, client, other_headers, other_tenant, number_id
):
    theirs = {"name": "Globex desk", "systemPrompt": "Theirs."}
    other_agent = client.post("/api/v1/agents", json=theirs, headers=other_headers).json["id"]
    base = f"{AGENTS}/{other_agent}"
    for tab in TABS:
        response = signed_in.get(base + tab)
        assert response.status_code == 404, tab
        assert response.content_type.startswith("text/html")
        assert "Globex desk" not in text(response)
    token = csrf_token(signed_in.get("/dashboard/"))
    before = snapshot()
    for path, form in [
        ("", {"name": "Mine"}),
        ("/prompt", {"systemPrompt": "Mine."}),
        ("/tools", {"toolsEnabled": "mine"}),
        ("/functions", {**FUNCTION, "form_id": "x"}),
        ("/analysis", {"summary": "false"}),
        ("/call", {"phoneNumberId": number_id, "to": "+6281300000009"}),
    ]:
        response = signed_in.post(base + path, data={**form, "csrf_token": token})
        assert response.status_code == 404, path
    assert snapshot() == before
    assert Call.select().count() == 0
