"""An agent's functions in a real browser: Test sends the live call's request to a real
endpoint on 127.0.0.1 and shows the answer; a timeout edited on the function's page."""

import hashlib
import hmac
import json
import re
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Page, expect

from tests.receiver import Answer, Receiver
from tests.system.browser.conftest import heading, row
from tests.system.browser.test_agents import open_agent, open_tab

SECRET = "browser-function-secret"
PARAMETERS = {
    "type": "object",
    "properties": {
        "number": {"type": "string", "description": "The order number."},
        "express": {"type": "boolean", "description": "Express shipping?"},
    },
    "required": ["number"],
}


def answer(request) -> Answer:
    if urlsplit(request.path).path == "/slow":
        return Answer(delay=3, body=b"{}")
    found = {"status": "shipped", "note": "<b>on its way</b>", "asked": request.json()}
    return Answer(body=json.dumps(found).encode(), headers={"Content-Type": "application/json"})


@pytest.fixture
def endpoint():
    with Receiver(answer) as receiver:
        yield receiver


def define(client, headers, agent_id, url: str) -> None:
    body = {
        "name": "lookup_order",
        "description": "Finds an order by its number.",
        "endpoint": url,
        "parameters": PARAMETERS,
        "secret": SECRET,
    }
    response = client.post(f"/api/v1/agents/{agent_id}/functions", json=body, headers=headers)
    assert response.status_code == 201


def answer_shown(page: Page):
    return page.get_by_role("region", name="Answer")


def open_test(page: Page, shot) -> None:
    """From the agent's page, the Test button of lookup_order."""
    row(page, "lookup_order").get_by_role("link", name="Test").click()
    expect(heading(page)).to_have_text("Test lookup_order")
    shot("test-function")


def test_a_function_test_shows_the_endpoints_answer_and_its_latency(
    page, shot, signed_in, client, headers, agent_id, endpoint
):
    define(client, headers, agent_id, endpoint.url + "/orders")
    signed_in("owner")
    open_agent(page, shot, "Reception")
    open_tab(page, shot, "Functions")
    expect(row(page, "lookup_order")).to_contain_text("5000 ms")
    open_test(page, shot)
    parameters = page.get_by_label("Parameters (JSON)")
    assert json.loads(parameters.input_value()) == {"number": "", "express": False}
    parameters.fill('{"number": "A-17", "express": true}')
    page.get_by_role("button", name="Send test").click()

    shown = answer_shown(page)
    expect(shown).to_contain_text("ok")
    expect(shown.locator("dd").nth(1)).to_have_text("200")
    expect(shown).to_contain_text(re.compile(r"\d+ ms of the 5000 ms budget"))
    expect(shown.locator("pre")).to_contain_text('"note": "<b>on its way</b>"')
    expect(shown.locator("b")).to_have_count(0)  # the endpoint's JSON is text, not markup
    shot("test-answered")
    [request] = endpoint.requests
    assert request.json() == {
        "callId": "call_test",
        "functionName": "lookup_order",
        "parameters": {"number": "A-17", "express": True},
    }
    expected = hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Service-Signature"] == f"sha256={expected}"
    expect(page.get_by_label("Parameters (JSON)")).to_have_value(
        '{"number": "A-17", "express": true}'
    )


def test_a_slow_endpoint_shows_function_timeout_within_the_budget_set_on_its_page(
    page, shot, signed_in, client, headers, agent_id, endpoint
):
    define(client, headers, agent_id, endpoint.url + "/slow")
    signed_in("owner")
    open_agent(page, shot, "Reception")
    open_tab(page, shot, "Functions")
    page.get_by_role("link", name="lookup_order").click()
    expect(heading(page)).to_have_text("Function lookup_order")
    shot("function")
    expect(page.get_by_label("Timeout (ms)")).to_have_value("5000")
    page.get_by_label("Timeout (ms)").fill("500")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_have_text("Function lookup_order saved.")
    shot("function-saved")

    page.get_by_role("link", name="Test").click()
    expect(heading(page)).to_have_text("Test lookup_order")
    shot("test-function")
    page.get_by_label("Parameters (JSON)").fill('{"number": "A-17"}')
    page.get_by_role("button", name="Send test").click()
    shown = answer_shown(page)
    expect(shown).to_contain_text("function_timeout: The function did not answer within 0.5 s.")
    expect(shown.locator("dd").nth(1)).to_have_text("none")
    latency = shown.locator("dd").nth(2).inner_text()
    shot("test-timed-out")
    match = re.fullmatch(r"(\d+) ms of the 500 ms budget", latency)
    assert match and int(match.group(1)) <= 500 + 500, latency
    assert len(endpoint.requests) == 1
    response = client.get(f"/api/v1/agents/{agent_id}/functions", headers=headers)
    assert response.json["functions"][0]["timeoutMs"] == 500


def test_bad_json_in_the_test_box_shows_its_message(
    page, shot, signed_in, client, headers, agent_id, endpoint
):
    define(client, headers, agent_id, endpoint.url + "/orders")
    signed_in("owner")
    open_agent(page, shot, "Reception")
    open_tab(page, shot, "Functions")
    open_test(page, shot)
    page.get_by_label("Parameters (JSON)").fill('{"number": ')
    page.get_by_role("button", name="Send test").click()
    box = page.get_by_label("Parameters (JSON)")
    expect(box).to_have_attribute("aria-invalid", "true")
    expect(box).to_have_accessible_description(re.compile(r"Not valid JSON"))
    expect(answer_shown(page)).to_have_count(0)
    shot("test-bad-json")
    assert endpoint.requests == []


def test_a_viewer_sees_the_functions_without_a_test_button(
    page, shot, signed_in, client, headers, agent_id, endpoint
):
    define(client, headers, agent_id, endpoint.url + "/orders")
    signed_in("viewer")
    open_agent(page, shot, "Reception")
    open_tab(page, shot, "Functions")
    expect(row(page, "lookup_order")).to_contain_text("5000 ms")
    expect(page.get_by_role("link", name="Test")).to_have_count(0)
    page.get_by_role("link", name="lookup_order").click()
    expect(heading(page)).to_have_text("Function lookup_order")
    shot("function")
    expect(page.get_by_label("Timeout (ms)")).to_be_disabled()
    expect(page.get_by_role("link", name="Test")).to_have_count(0)
    expect(page.get_by_role("button", name="Save")).to_have_count(0)


def test_rotating_the_signing_secret_signs_with_both_until_the_overlap_ends(
    page, shot, signed_in, client, headers, agent_id, endpoint
):
    """Rotate secret on the function's page: the new secret shown once with Copy, and a test
    request then carries the new secret's signature and the old one's beside it."""
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    define(client, headers, agent_id, endpoint.url + "/orders")
    signed_in("admin")
    open_agent(page, shot, "Reception")
    open_tab(page, shot, "Functions")
    page.get_by_role("link", name="lookup_order").click()
    shot("function")
    page.get_by_role("link", name="Rotate secret").click()
    expect(heading(page)).to_have_text("Rotate the signing secret of lookup_order")
    shot("rotate-secret")
    page.get_by_role("button", name="Rotate secret").click()
    expect(heading(page)).to_have_text("Function lookup_order")
    expect(page.get_by_role("status")).to_contain_text("X-Service-Signature-Previous")
    shot("secret-rotated")
    new = page.get_by_label("New signing secret").input_value()
    page.get_by_role("button", name="Copy").click()
    expect(page.get_by_role("button", name="Copied")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == new
    page.get_by_role("link", name="Test", exact=True).click()
    expect(heading(page)).to_have_text("Test lookup_order")
    shot("test-function")
    page.get_by_label("Parameters (JSON)").fill('{"number": "A-17"}')
    page.get_by_role("button", name="Send test").click()
    expect(answer_shown(page)).to_contain_text("ok")
    shot("tested")
    [request] = endpoint.requests
    for name, secret in (("X-Service-Signature", new), ("X-Service-Signature-Previous", SECRET)):
        expected = hmac.new(secret.encode(), request.body, hashlib.sha256).hexdigest()
        assert request.headers[name] == f"sha256={expected}"
