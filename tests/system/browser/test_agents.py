"""The Agents pages in a real browser: create, edit, add a function, delete, as a viewer, and
an agent's tabs, each a page of its own."""

import re

from playwright.sync_api import Page, expect

from app.services import agents as agent_service
from app.services import functions as function_service
from tests.system.browser.conftest import heading

LANGUAGE_MESSAGE = "Must be a language tag such as id or en-US."


def open_agents(page: Page, shot) -> None:
    """From the menu to the Agents list."""
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Agents").click()
    expect(heading(page)).to_have_text("Agents")
    shot("agents")


def open_agent(page: Page, shot, name: str) -> None:
    """From the menu to the agent's own page, by its name in the list."""
    open_agents(page, shot)
    page.get_by_role("link", name=name, exact=True).click()
    expect(heading(page)).to_have_text(name)
    shot("agent")


def open_tab(page: Page, shot, name: str) -> None:
    """On an agent's page, its tab of that name, from the tab bar."""
    tabs = page.get_by_role("navigation", name="Agent")
    tabs.get_by_role("link", name=name, exact=True).click()
    expect(tabs.get_by_role("link", name=name, exact=True)).to_have_attribute(
        "aria-current", "page"
    )
    shot(f"agent-{name}")


def agent_row(page: Page, name: str):
    return page.get_by_role("row").filter(has=page.get_by_role("link", name=name, exact=True))


def test_an_agent_created_in_its_form_is_listed_and_in_the_api(
    page, shot, signed_in, client, headers
):
    signed_in("owner")
    open_agents(page, shot)
    page.get_by_role("link", name="Create agent").click()
    expect(heading(page)).to_have_text("Create agent")
    shot("create-agent")
    page.get_by_label("Name", exact=True).fill("Front desk")
    page.get_by_label("System prompt").fill("You answer for Acme.\nBe brief.")
    page.get_by_label("Voice").select_option("Kore")
    page.get_by_label("Greeting text").fill("Acme, good morning!")
    page.get_by_label("Language").fill("en-US")
    page.get_by_label("Max call duration (minutes)").fill("15")
    page.get_by_label("Escalation number").fill("+6281234567")
    page.get_by_label("Tools enabled").fill("end_call, transfer_call")
    page.get_by_role("button", name="Create agent").click()

    expect(page.get_by_role("status")).to_have_text("Agent Front desk created.")
    expect(heading(page)).to_have_text("Front desk")
    shot("agent-created")
    agent_id = page.url.rsplit("/", 1)[-1]
    response = client.get(f"/api/v1/agents/{agent_id}", headers=headers)
    assert response.status_code == 200
    assert response.json["id"] == agent_id
    expected = {
        "name": "Front desk",
        "systemPrompt": "You answer for Acme.\nBe brief.",
        "voiceId": "Kore",
        "greetingText": "Acme, good morning!",
        "language": "en-US",
        "maxCallDurationMinutes": 15,
        "escalationNumber": "+6281234567",
        "toolsEnabled": ["end_call", "transfer_call"],
        "isActive": True,
    }
    assert {key: response.json[key] for key in expected} == expected

    open_agents(page, shot)
    row = agent_row(page, "Front desk")
    expect(row.get_by_role("cell")).to_have_text(
        ["Front desk", "Kore", "en-US", "15", "Yes", "none", "0"]
    )


def test_saving_one_changed_field_changes_only_that_field(
    page, shot, signed_in, client, headers, agent_id
):
    before = client.get(f"/api/v1/agents/{agent_id}", headers=headers).json
    signed_in("owner")
    open_agent(page, shot, "Reception")
    expect(page.get_by_label("Max call duration (minutes)")).to_have_value("10")
    page.get_by_label("Max call duration (minutes)").fill("25")
    page.get_by_role("button", name="Save").click()

    expect(page.get_by_role("status")).to_have_text("Agent saved.")
    expect(page.get_by_label("Max call duration (minutes)")).to_have_value("25")
    shot("agent-saved")
    after = client.get(f"/api/v1/agents/{agent_id}", headers=headers).json
    changed = {key for key in before if before[key] != after[key]}
    # A call-facing change makes the agent's next version.
    assert changed == {"maxCallDurationMinutes", "updatedAt", "version"}
    assert after["maxCallDurationMinutes"] == 25


def test_a_bad_language_shows_its_message_next_to_the_field(
    page, shot, signed_in, client, headers, agent_id
):
    signed_in("owner")
    open_agent(page, shot, "Reception")
    page.get_by_label("Language").fill("English")
    page.get_by_role("button", name="Save").click()

    language = page.get_by_label("Language")
    expect(language).to_have_attribute("aria-invalid", "true")
    expect(language).to_have_accessible_description(re.compile(re.escape(LANGUAGE_MESSAGE)))
    expect(language).to_have_value("English")
    expect(page.get_by_text(LANGUAGE_MESSAGE)).to_have_count(1)
    shot("bad-language")
    assert client.get(f"/api/v1/agents/{agent_id}", headers=headers).json["language"] == "id"


def test_an_added_function_shows_its_signing_secret_once(
    page, shot, signed_in, client, headers, tenant, agent_id
):
    signed_in("owner")
    open_agent(page, shot, "Reception")
    open_tab(page, shot, "Functions")
    expect(page.get_by_text("No functions")).to_be_visible()
    page.get_by_label("Function name").fill("lookup_order")
    page.get_by_label("Description").fill("Finds an order by its number.")
    page.get_by_label("Endpoint URL").fill("http://127.0.0.1:9/orders")
    page.get_by_label("Method").select_option("GET")
    page.get_by_label("Parameters (JSON)").fill(
        '{"type": "object", "properties": {"number": {"type": "string",'
        ' "description": "The order number."}}, "required": ["number"]}'
    )
    page.get_by_role("button", name="Add function").click()

    created = page.get_by_role("status").filter(has_text="Function lookup_order added.")
    expect(created).to_contain_text("shown only this once")
    secret = created.get_by_label("Signing secret").input_value()
    assert len(secret) >= 16
    expect(page.get_by_role("row").filter(has_text="lookup_order")).to_contain_text("GET")
    shot("function-added")
    agent = agent_service.get_agent(tenant=tenant, agent_id=agent_id)
    assert function_service.get_function(agent=agent, name="lookup_order").signing_secret == secret
    response = client.get(f"/api/v1/agents/{agent_id}/functions", headers=headers)
    assert [function["method"] for function in response.json["functions"]] == ["GET"]
    assert secret not in response.text

    open_agent(page, shot, "Reception")
    open_tab(page, shot, "Functions")
    expect(page.get_by_role("row").filter(has_text="lookup_order")).to_be_visible()
    expect(page.get_by_text(secret)).to_have_count(0)
    expect(page.get_by_role("status")).to_have_count(0)


def test_an_agent_deleted_through_its_confirmation_is_gone(
    page, shot, signed_in, client, headers, agent_id
):
    signed_in("owner")
    open_agent(page, shot, "Reception")
    page.get_by_role("link", name="Delete agent").click()
    expect(heading(page)).to_have_text("Delete agent Reception")
    shot("confirm-delete")
    page.get_by_role("link", name="Cancel").click()
    expect(heading(page)).to_have_text("Reception")
    shot("not-deleted")
    assert client.get(f"/api/v1/agents/{agent_id}", headers=headers).status_code == 200

    page.get_by_role("link", name="Delete agent").click()
    shot("confirm-delete-again")
    page.get_by_role("button", name="Delete agent").click()
    expect(page.get_by_role("status")).to_have_text("Agent Reception deleted.")
    expect(heading(page)).to_have_text("Agents")
    expect(page.get_by_role("link", name="Reception", exact=True)).to_have_count(0)
    expect(page.get_by_text("No agents yet.")).to_be_visible()
    shot("deleted")
    assert client.get(f"/api/v1/agents/{agent_id}", headers=headers).status_code == 404


def test_a_viewer_sees_the_agents_without_their_change_buttons(page, shot, signed_in, agent_id):
    signed_in("viewer")
    open_agents(page, shot)
    expect(agent_row(page, "Reception")).to_be_visible()
    expect(page.get_by_role("link", name="Create agent")).to_have_count(0)
    page.get_by_role("link", name="Reception", exact=True).click()
    expect(heading(page)).to_have_text("Reception")
    shot("agent")
    expect(page.get_by_label("Name", exact=True)).to_be_disabled()
    for name in ("Save", "Add function", "Delete agent"):
        expect(page.get_by_role("button", name=name)).to_have_count(0)
        expect(page.get_by_role("link", name=name)).to_have_count(0)


# The tops of a navigation's links: one value when they all sit on one line.
LINK_TOPS = "nav => [...new Set([...nav.querySelectorAll('a')].map(a => a.offsetTop))]"


def test_an_agents_tabs_are_pages_of_their_own(page, shot, signed_in, client, headers, agent_id):
    """Through every tab and back: each its own URL, marked in the tab bar; the Prompt tab's
    form saves and comes back to it, the Functions tab's tools form shows its problem there."""
    signed_in("owner")
    open_agent(page, shot, "Reception")
    tabs = page.get_by_role("navigation", name="Agent")
    expect(tabs.get_by_role("link")).to_have_text(
        ["Overview", "Prompt", "Functions", "Analysis", "Calls", "Versions"]
    )
    expect(tabs.get_by_role("link", name="Overview")).to_have_attribute("aria-current", "page")
    # At 1,280 px the menu and the tab bar each hold one line.
    assert len(page.get_by_role("navigation", name="Main").evaluate(LINK_TOPS)) == 1
    assert len(tabs.evaluate(LINK_TOPS)) == 1
    base = page.url
    for name, path, part in (
        ("Prompt", "/prompt", page.get_by_label("System prompt")),
        ("Functions", "/functions", page.get_by_role("heading", name="Tools enabled")),
        ("Analysis", "/analysis", page.get_by_label("Success criteria")),
        ("Calls", "/calls", page.get_by_role("heading", name="Calls by version, last 30 days")),
        ("Versions", "/versions", page.get_by_role("link", name="Version 1", exact=True)),
        ("Overview", "", page.get_by_label("Max call duration (minutes)")),
    ):
        open_tab(page, shot, name)
        assert page.url == base + path
        expect(heading(page)).to_have_text("Reception")
        expect(part).to_be_visible()
        expect(tabs.locator("[aria-current=page]")).to_have_count(1)

    open_tab(page, shot, "Prompt")
    page.get_by_label("System prompt").fill("Greet {{name}} warmly.")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_have_text("Prompt saved.")
    assert page.url == base + "/prompt"
    expect(page.get_by_role("cell", name="{{name}}")).to_be_visible()
    shot("prompt-saved")
    assert client.get(f"/api/v1/agents/{agent_id}", headers=headers).json["systemPrompt"] == (
        "Greet {{name}} warmly."
    )

    open_tab(page, shot, "Functions")
    page.get_by_label("Tools enabled").fill("end_call, end_call")
    page.get_by_role("button", name="Save tools").click()
    tools = page.get_by_label("Tools enabled")
    expect(tools).to_have_attribute("aria-invalid", "true")
    expect(tools).to_have_accessible_description(re.compile("Items must be unique."))
    expect(tabs.get_by_role("link", name="Functions")).to_have_attribute("aria-current", "page")
    shot("bad-tools")
    page.get_by_label("Tools enabled").fill("end_call")
    page.get_by_role("button", name="Save tools").click()
    expect(page.get_by_role("status")).to_have_text("Tools enabled saved.")
    assert page.url == base + "/functions"
    expect(page.get_by_label("Tools enabled")).to_have_value("end_call")
    shot("tools-saved")
    agent = client.get(f"/api/v1/agents/{agent_id}", headers=headers).json
    assert agent["toolsEnabled"] == ["end_call"] and agent["name"] == "Reception"
