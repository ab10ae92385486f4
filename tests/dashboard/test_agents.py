"""Dashboard agents: list, create, edit, delete, and the agents' functions (the agent's tabs
one by one are in test_agent_tabs.py)."""

import json
import logging
import re

import pytest

from app.models import AuditEntry, Function
from tests.dashboard.audit import changes
from tests.dashboard.conftest import csrf_token, sign_in

AGENTS = "/dashboard/agents"
PARAMETERS = (
    '{"type": "object", "properties": {"date": {"type": "string", '
    '"description": "The day, as YYYY-MM-DD."}}, "required": ["date"]}'
)
# Every field of the form, as a browser sends it: the Active box ticked, then its hidden
# "false".
FORM = {
    "name": "Front desk",
    "systemPrompt": "You answer for the clinic.\r\nBe brief.",
    "voiceId": "Kore",
    "greetingText": "Hello, clinic here.",
    "language": "en-US",
    "maxCallDurationMinutes": "25",
    "escalationNumber": "+6281234567",
    "toolsEnabled": "book_slot, cancel_slot",
    "isActive": ["true", "false"],
}
FUNCTION = {
    "name": "book_slot",
    "description": "Books a slot.",
    "endpoint": "https://clinic.example.com/book",
    "method": "PUT",
    "parameters": PARAMETERS,
}
API_FUNCTION = {**FUNCTION, "parameters": json.loads(PARAMETERS)}


def api_agent(client, headers, agent_id):
    return client.get(f"/api/v1/agents/{agent_id}", headers=headers)


def text(response) -> str:
    return response.get_data(as_text=True)


def created_id(response) -> str:
    assert response.status_code == 302, text(response)
    match = re.fullmatch(r"/dashboard/agents/(agent_[a-z0-9]{20})", response.headers["Location"])
    assert match, response.headers["Location"]
    return match.group(1)


@pytest.fixture
def other_agent_id(client, other_headers):
    body = {"name": "Globex desk", "systemPrompt": "Theirs."}
    return client.post("/api/v1/agents", json=body, headers=other_headers).json["id"]


def test_agents_page_lists_each_agent_with_its_numbers_and_functions(
    signed_in, headers, tenant, did, agent_id
):
    signed_in.post(f"/api/v1/agents/{agent_id}/functions", json=API_FUNCTION, headers=headers)
    page = signed_in.get(AGENTS)
    assert page.status_code == 200
    body = text(page)
    assert "<h1>Agents</h1>" in body
    assert f'href="/dashboard/agents/{agent_id}">Reception</a>' in body
    row = body[body.index("Reception") : body.index("</tr>", body.index("Reception"))]
    assert "Puck" in row and "<td>10</td>" in row and did in row and "<td>1</td>" in row
    assert "Create agent" in body and 'href="/dashboard/agents/new"' in body
    assert 'aria-current="page">Agents</a>' in body


def test_create_agent_form_offers_the_defaults(signed_in):
    page = signed_in.get(f"{AGENTS}/new")
    assert page.status_code == 200
    body = text(page)
    assert "<h1>Create agent</h1>" in body
    assert '<option value="Puck" selected>Puck</option>' in body
    assert 'name="language" value="id"' in body
    assert 'name="maxCallDurationMinutes" value="10"' in body
    assert 'name="isActive" value="true" checked' in body
    for label in (
        "Name",
        "System prompt",
        "Voice",
        "Greeting text",
        "Language",
        "Max call duration (minutes)",
        "Escalation number",
        "Tools enabled",
        "Active",
    ):
        assert f">{label}</label>" in body, label  # fmt: skip


def test_create_agent_with_every_field_shows_in_the_api(signed_in, post, headers):
    response = post(f"{AGENTS}/new", FORM)
    agent_id = created_id(response)
    agent = api_agent(signed_in, headers, agent_id).json
    assert agent["name"] == "Front desk"
    assert agent["systemPrompt"] == "You answer for the clinic.\nBe brief."
    assert (agent["voiceId"], agent["language"], agent["maxCallDurationMinutes"]) == (
        "Kore",
        "en-US",
        25,
    )
    assert agent["greetingText"] == "Hello, clinic here."
    assert agent["escalationNumber"] == "+6281234567"
    assert agent["toolsEnabled"] == ["book_slot", "cancel_slot"]
    assert agent["isActive"] is True
    page = signed_in.get(response.headers["Location"])
    assert "Agent Front desk created." in text(page) and "<h1>Front desk</h1>" in text(page)
    assert changes() == [("agent.created", agent_id, {})]
    entry = AuditEntry.get(AuditEntry.action == "agent.created")
    assert (entry.actor_type, entry.actor_label, entry.address) == (
        "user",
        "owner@acme.test",
        "127.0.0.1",
    )


def test_create_agent_with_only_the_required_fields_takes_the_defaults(signed_in, post, headers):
    response = post(f"{AGENTS}/new", {"name": "Min", "systemPrompt": "Hi.", "escalationNumber": ""})
    agent = api_agent(signed_in, headers, created_id(response)).json
    assert (agent["voiceId"], agent["language"], agent["maxCallDurationMinutes"]) == (
        "Puck",
        "id",
        10,
    )
    assert agent["escalationNumber"] is None and agent["isActive"] is True


def test_an_unticked_active_box_creates_an_inactive_agent(signed_in, post, headers):
    response = post(f"{AGENTS}/new", {**FORM, "isActive": "false"})
    assert api_agent(signed_in, headers, created_id(response)).json["isActive"] is False


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("language", "english", "Must be a language tag such as id or en-US."),
        ("name", "", "Use 1 to 100 characters."),
        ("name", "n" * 101, "Use 1 to 100 characters."),
        ("systemPrompt", "p" * 20_001, "Use 1 to 20000 characters."),
        ("voiceId", "Bob", "Choose one of Puck, Charon, Kore, Fenrir, Aoede."),
        ("maxCallDurationMinutes", "0", "Enter a number from 1 to 120."),
        ("maxCallDurationMinutes", "ten", "Enter a whole number."),
        ("escalationNumber", "0812", "Must be an international number such as +6281234567."),
        ("toolsEnabled", "a, a", "Items must be unique."),
        ("isActive", "maybe", "Choose yes or no."),
    ],
)
def test_create_agent_with_a_bad_field_shows_its_message(
    signed_in, post, headers, field, value, message
):
    response = post(f"{AGENTS}/new", {**FORM, field: value})
    assert response.status_code == 422
    body = text(response)
    assert f'id="{field}-error"' in body and message in body
    assert 'aria-invalid="true"' in body
    assert "Front desk" in body or field == "name"  # the input is kept
    assert signed_in.get("/api/v1/agents", headers=headers).json == {"agents": []}


def test_agent_page_shows_the_form_filled_in(signed_in, agent_id):
    page = signed_in.get(f"{AGENTS}/{agent_id}")
    assert page.status_code == 200
    body = text(page)
    assert "<h1>Reception</h1>" in body
    assert 'name="name" value="Reception"' in body
    assert '<option value="Puck" selected>Puck</option>' in body
    assert "Save" in body and "Delete agent" in body
    prompt = text(signed_in.get(f"{AGENTS}/{agent_id}/prompt"))
    assert ">\nBe helpful.</textarea>" in prompt


def test_saving_one_changed_field_changes_only_that_field(signed_in, post, headers, agent_id):
    before = api_agent(signed_in, headers, agent_id).json
    # The whole form as the page shows it, with one field changed.
    form = {
        "name": "Reception",
        "systemPrompt": "Be helpful.",
        "voiceId": "Puck",
        "greetingText": "",
        "language": "ms",
        "maxCallDurationMinutes": "10",
        "escalationNumber": "",
        "toolsEnabled": "",
        "isActive": ["true", "false"],
    }
    response = post(f"{AGENTS}/{agent_id}", form)
    assert response.status_code == 302
    assert response.headers["Location"] == f"/dashboard/agents/{agent_id}"
    after = api_agent(signed_in, headers, agent_id).json
    assert after["language"] == "ms"
    moved = ("language", "updatedAt", "version")
    assert {k: v for k, v in after.items() if k not in moved} == {
        k: v for k, v in before.items() if k not in moved
    }
    assert after["version"] == before["version"] + 1
    assert changes() == [("agent.updated", agent_id, {"fields": ["language"]})]
    assert "Agent saved." in text(signed_in.get(f"{AGENTS}/{agent_id}"))


def test_a_field_left_out_of_the_form_keeps_its_value(signed_in, post, headers, agent_id):
    signed_in.patch(
        f"/api/v1/agents/{agent_id}",
        json={"escalationNumber": "+6281111111", "isActive": False},
        headers=headers,
    )
    response = post(f"{AGENTS}/{agent_id}", {"maxCallDurationMinutes": "30"})
    assert response.status_code == 302
    agent = api_agent(signed_in, headers, agent_id).json
    assert agent["maxCallDurationMinutes"] == 30
    assert agent["escalationNumber"] == "+6281111111" and agent["isActive"] is False
    assert agent["name"] == "Reception"


def test_saving_an_unchanged_form_changes_nothing(signed_in, post, headers, agent_id):
    before = api_agent(signed_in, headers, agent_id).json
    response = post(f"{AGENTS}/{agent_id}", {"name": "Reception", "isActive": ["true", "false"]})
    assert response.status_code == 302
    assert api_agent(signed_in, headers, agent_id).json == before
    assert "Nothing to save" in text(signed_in.get(f"{AGENTS}/{agent_id}"))


def test_clearing_the_escalation_number_and_unticking_active(signed_in, post, headers, agent_id):
    signed_in.patch(
        f"/api/v1/agents/{agent_id}", json={"escalationNumber": "+6281111111"}, headers=headers
    )
    post(f"{AGENTS}/{agent_id}", {"escalationNumber": "", "isActive": "false"})
    agent = api_agent(signed_in, headers, agent_id).json
    assert agent["escalationNumber"] is None and agent["isActive"] is False


@pytest.mark.parametrize(
    "tab, field, value, message",
    [
        ("", "language", "Bahasa", "Must be a language tag such as id or en-US."),
        ("", "name", "", "Use 1 to 100 characters."),
        ("/prompt", "systemPrompt", "p" * 20_001, "Use 1 to 20000 characters."),
        ("", "maxCallDurationMinutes", "121", "Enter a number from 1 to 120."),
    ],
)
def test_saving_a_bad_field_shows_its_message_and_changes_nothing(
    signed_in, post, headers, agent_id, tab, field, value, message
):
    before = api_agent(signed_in, headers, agent_id).json
    form = {"name": "Renamed", "greetingText": "Hi.", field: value}
    response = post(f"{AGENTS}/{agent_id}{tab}", form)
    assert response.status_code == 422
    body = text(response)
    assert message in body and f'id="{field}-error"' in body
    assert "<h1>Reception</h1>" in body  # the saved name, while the form keeps the input
    assert api_agent(signed_in, headers, agent_id).json == before


def test_delete_asks_for_confirmation_then_deletes(signed_in, post, headers, tenant, did, agent_id):
    agent_page = text(signed_in.get(f"{AGENTS}/{agent_id}"))
    # The agent's page links to a confirmation step; nothing there deletes at once.
    assert f'href="/dashboard/agents/{agent_id}/delete">Delete agent</a>' in agent_page
    confirm = signed_in.get(f"{AGENTS}/{agent_id}/delete")
    assert confirm.status_code == 200
    body = text(confirm)
    assert "<h1>Delete agent Reception</h1>" in body
    assert f'action="/dashboard/agents/{agent_id}/delete"' in body
    assert ">Delete agent</button>" in body and "Cancel" in body
    assert api_agent(signed_in, headers, agent_id).status_code == 200
    response = post(f"{AGENTS}/{agent_id}/delete")
    assert response.status_code == 302 and response.headers["Location"] == AGENTS
    assert api_agent(signed_in, headers, agent_id).status_code == 404
    [number] = signed_in.get("/api/v1/phone-numbers", headers=headers).json["phoneNumbers"]
    assert number["agentId"] is None
    assert "Agent Reception deleted." in text(signed_in.get(AGENTS))
    assert changes() == [("agent.deleted", agent_id, {})]
    assert signed_in.get(f"{AGENTS}/{agent_id}").status_code == 404


def test_add_function_shows_its_secret_once(signed_in, post, headers, agent_id, caplog):
    caplog.set_level(logging.DEBUG)
    response = post(f"{AGENTS}/{agent_id}/functions", FUNCTION)
    assert response.status_code == 201
    secret = Function.get().signing_secret
    assert secret.startswith("fsec_")
    body = text(response)
    assert f'readonly value="{secret}"' in body and "shown only this once" in body
    [listed] = signed_in.get(f"/api/v1/agents/{agent_id}/functions", headers=headers).json[
        "functions"
    ]
    assert (listed["name"], listed["method"], listed["endpoint"]) == (
        "book_slot",
        "PUT",
        "https://clinic.example.com/book",
    )
    assert listed["parameters"]["required"] == ["date"]
    again = text(signed_in.get(f"{AGENTS}/{agent_id}/functions"))
    assert secret not in again
    assert "<code>book_slot</code>" in again and "Books a slot." in again
    assert all(secret not in record.getMessage() for record in caplog.records)
    assert all(secret not in str(record.__dict__) for record in caplog.records)
    assert changes() == [("function.created", Function.get().id, {"agentId": agent_id})]
    assert secret not in str(list(AuditEntry.select().dicts()))
    assert secret not in str(signed_in.get_cookie("session"))


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("parameters", "{not json", "Not valid JSON (line 1, column 2)."),
        ("parameters", '{"type": "array"}', "type: Must be object."),
        ("parameters", '{"type": "object", "required": ["x"]}', "Not declared in properties: x."),
        ("parameters", '{"type": "object", "properties": {"a": {"type": "text"}}}',
         "properties.a.type: Choose one of"),
        ("parameters", "[" * 40 + "]" * 40, "nested more than 32 levels"),
        ("parameters", "[" * 5000 + "]" * 5000, "nested more than 32 levels"),
        ("parameters", '{"type": "object", "x": "\\ud800"}', "unpaired surrogate"),
        ("name", "9lives", "Letters, digits and _, not starting with a digit."),
        ("description", "", "Use 1 to 1024 characters."),
        ("method", "TRACE", "Choose one of GET, POST, PUT, PATCH, DELETE."),
        ("endpoint", "ftp://clinic.example.com/x", "https"),
    ],
)  # fmt: skip
def test_add_function_with_a_bad_field_shows_its_message(
    signed_in, post, agent_id, field, value, message
):
    response = post(f"{AGENTS}/{agent_id}/functions", {**FUNCTION, field: value})
    assert response.status_code == 422
    body = text(response)
    assert message in body and f'id="function-{field}-error"' in body
    assert Function.select().count() == 0


def test_add_function_refuses_a_private_endpoint_as_the_api_does(app, signed_in, post, agent_id):
    app.config["ALLOW_PRIVATE_URLS"] = False
    response = post(
        f"{AGENTS}/{agent_id}/functions", {**FUNCTION, "endpoint": "https://10.0.0.1/x"}
    )
    assert response.status_code == 422
    assert 'id="function-endpoint-error"' in text(response)
    assert Function.select().count() == 0


def test_add_function_with_a_name_taken_is_409(signed_in, post, agent_id):
    assert post(f"{AGENTS}/{agent_id}/functions", FUNCTION).status_code == 201
    response = post(f"{AGENTS}/{agent_id}/functions", FUNCTION)
    assert response.status_code == 409
    assert "already has a function named book_slot" in text(response)
    assert Function.select().count() == 1


def test_delete_function_asks_for_confirmation(signed_in, post, headers, agent_id):
    post(f"{AGENTS}/{agent_id}/functions", FUNCTION)
    path = f"{AGENTS}/{agent_id}/functions/book_slot/delete"
    assert f'href="{path}">Delete</a>' in text(signed_in.get(f"{AGENTS}/{agent_id}/functions"))
    confirm = signed_in.get(path)
    assert confirm.status_code == 200 and ">Delete function</button>" in text(confirm)
    response = post(path)
    assert response.status_code == 302
    assert response.headers["Location"] == f"{AGENTS}/{agent_id}/functions"
    functions = signed_in.get(f"/api/v1/agents/{agent_id}/functions", headers=headers).json
    assert functions == {"functions": []}
    assert [change[0] for change in changes()] == ["function.created", "function.deleted"]
    assert signed_in.get(path).status_code == 404


def test_a_viewer_sees_agents_without_buttons_and_cannot_change_them(
    client, viewer, headers, agent_id
):
    sign_in(client, viewer.email)
    client.post(f"/api/v1/agents/{agent_id}/functions", json=API_FUNCTION, headers=headers)
    listing = text(client.get(AGENTS))
    assert "Reception" in listing and "Create agent" not in listing
    for tab in ("", "/prompt", "/functions", "/calls", "/versions"):
        page = client.get(f"{AGENTS}/{agent_id}{tab}")
        assert page.status_code == 200, tab
        body = text(page)
        for button in ("Save", "Add function", "Delete", "<button"):
            assert button not in body.split("</header>", 1)[1], (tab, button)
        assert f'action="{AGENTS}/{agent_id}/call"' not in body
        if tab not in ("/calls", "/versions"):
            assert '<fieldset class="plain" disabled>' in body, tab
    assert "book_slot" in text(client.get(f"{AGENTS}/{agent_id}/functions"))
    assert client.get(f"{AGENTS}/new").status_code == 403
    assert client.get(f"{AGENTS}/{agent_id}/delete").status_code == 403
    assert client.get(f"{AGENTS}/{agent_id}/functions/book_slot/delete").status_code == 403
    token = csrf_token(client.get("/dashboard/"))
    for path, data in [
        (f"{AGENTS}/new", FORM),
        (f"{AGENTS}/{agent_id}", {"name": "Mine"}),
        (f"{AGENTS}/{agent_id}/prompt", {"systemPrompt": "Mine."}),
        (f"{AGENTS}/{agent_id}/tools", {"toolsEnabled": "mine"}),
        (f"{AGENTS}/{agent_id}/delete", {}),
        (f"{AGENTS}/{agent_id}/functions", {**FUNCTION, "name": "other"}),
        (f"{AGENTS}/{agent_id}/functions/book_slot/delete", {}),
    ]:
        assert client.post(path, data={**data, "csrf_token": token}).status_code == 403, path
    agent = api_agent(client, headers, agent_id).json
    assert (agent["name"], agent["systemPrompt"], agent["toolsEnabled"]) == (
        "Reception",
        "Be helpful.",
        [],
    )
    assert len(client.get(f"/api/v1/agents/{agent_id}/functions", headers=headers).json[
        "functions"]) == 1  # fmt: skip


def test_another_tenants_agent_is_404_on_every_route(
    signed_in, post, other_headers, other_agent_id
):
    signed_in.post(
        f"/api/v1/agents/{other_agent_id}/functions", json=API_FUNCTION, headers=other_headers
    )
    base = f"{AGENTS}/{other_agent_id}"
    for path in (base, f"{base}/delete", f"{base}/functions/book_slot/delete"):
        response = signed_in.get(path)
        assert response.status_code == 404, path
        assert response.content_type.startswith("text/html")
    for path, data in [
        (base, {"name": "Mine"}),
        (f"{base}/delete", {}),
        (f"{base}/functions", {**FUNCTION, "name": "other"}),
        (f"{base}/functions/book_slot/delete", {}),
    ]:
        assert post(path, data).status_code == 404, path
    agent = signed_in.get(f"/api/v1/agents/{other_agent_id}", headers=other_headers).json
    assert agent["name"] == "Globex desk"
    assert Function.select().count() == 1
    assert "Globex desk" not in text(signed_in.get(AGENTS))


def test_an_unknown_function_is_404(signed_in, agent_id):
    assert signed_in.get(f"{AGENTS}/{agent_id}/functions/nope/delete").status_code == 404


@pytest.mark.parametrize(
    "path", ["/new", "/{agent}", "/{agent}/prompt", "/{agent}/tools", "/{agent}/delete",
             "/{agent}/functions", "/{agent}/functions/book_slot/delete"],
)  # fmt: skip
def test_a_post_without_its_csrf_token_is_refused(signed_in, headers, agent_id, path):
    signed_in.post(f"/api/v1/agents/{agent_id}/functions", json=API_FUNCTION, headers=headers)
    response = signed_in.post(AGENTS + path.format(agent=agent_id), data={**FORM, **FUNCTION})
    assert response.status_code == 400
    assert "This form has expired" in text(response)
    agent = api_agent(signed_in, headers, agent_id).json
    assert (agent["name"], agent["systemPrompt"], agent["toolsEnabled"]) == (
        "Reception",
        "Be helpful.",
        [],
    )
    assert Function.select().count() == 1


# The tabs whose form saves the agent's settings, each some of its fields.
TAB_FORMS = ("", "/prompt", "/tools")
JUNK = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "%00",
    "' OR 1=1 --",
    "<script>alert(1)</script>",
    "9" * 400,
    "-1",
    "1e9",
    "null",
    "[]",
    "{}",
    "x" * 70_000,
    "\u202e\u0000\ufeff",
    "\r\n\r\n",
]


@pytest.mark.parametrize("value", JUNK)
def test_junk_in_any_field_is_never_a_500(signed_in, post, agent_id, value):
    for field in list(FORM) + ["unknown"]:
        for path in (f"{AGENTS}/new", *(f"{AGENTS}/{agent_id}{tab}" for tab in TAB_FORMS)):
            response = post(path, {**FORM, field: value})
            assert response.status_code in (302, 422), (path, field, response.status_code)
            if response.status_code == 422:
                assert 'class="field-error"' in text(response)
    for field in list(FUNCTION) + ["secret"]:
        response = post(f"{AGENTS}/{agent_id}/functions", {**FUNCTION, field: value})
        assert response.status_code in (201, 409, 422), (field, response.status_code)
    for path in (f"{AGENTS}/{value}", f"{AGENTS}/{agent_id}/functions/{value}/delete"):
        if value.strip("\r\n /"):
            assert signed_in.get(path).status_code < 500, path


def test_a_nul_in_an_id_is_a_404(signed_in, agent_id):
    assert signed_in.get(f"{AGENTS}/{agent_id}%00").status_code == 404
    assert signed_in.get(f"{AGENTS}/agent_x%00/delete").status_code == 404


def test_tools_enabled_says_what_it_is_apart_from_the_functions(signed_in, agent_id):
    page = signed_in.get(f"{AGENTS}/new").get_data(True)
    field = re.search(r'<input[^>]*id="toolsEnabled"[^>]*aria-describedby="([^"]+)"', page)
    assert field, "the field is described by its help text"
    hint = re.search(rf'id="{field.group(1).split()[0]}"[^>]*>(.*?)<', page, re.S).group(1)
    assert "voice runtime" in hint and "not the functions" in hint
    # On the Functions tab, beside the agent's functions, in words of its own.
    tab = signed_in.get(f"{AGENTS}/{agent_id}/functions").get_data(True)
    explained = re.search(r'<p id="tools-explained">(.*?)</p>', tab, re.S).group(1)
    assert tab.index('id="functions"') < tab.index('id="tools"') < tab.index('id="add-function"')
    for words in ("Tools are not functions", "runs none of them", "no endpoint", "toolsEnabled"):
        assert words in explained, words
