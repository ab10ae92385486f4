"""The Phone numbers page in a real browser: assigning an agent to a number, and no agent."""

import pytest
from playwright.sync_api import Page, expect

from app.services import phone_numbers as number_service
from tests.helpers import ACTOR
from tests.system.browser.conftest import heading

NUMBER = "+6221555020"


@pytest.fixture
def number(tenant):
    """A number provisioned for the tenant, answered by no agent yet."""
    return number_service.add_number(
        actor=ACTOR, tenant=tenant, display_number=NUMBER, label="Sales"
    )


def open_numbers(page: Page, shot) -> None:
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Phone numbers").click()
    expect(heading(page)).to_have_text("Phone numbers")
    shot("phone-numbers")


def number_row(page: Page):
    return page.get_by_role("row").filter(has=page.get_by_role("cell", name=NUMBER, exact=True))


def agent_of_number(client, headers, number_id: str) -> str | None:
    numbers = client.get("/api/v1/phone-numbers", headers=headers).json["phoneNumbers"]
    return next(number for number in numbers if number["id"] == number_id)["agentId"]


def test_assigning_an_agent_to_a_number_and_then_no_agent(
    page, shot, signed_in, client, headers, agent_id, number
):
    signed_in("owner")
    open_numbers(page, shot)
    row = number_row(page)
    expect(row).to_contain_text("Sales")
    expect(row.get_by_label(f"Agent for {NUMBER}")).to_have_value("")

    row.get_by_label(f"Agent for {NUMBER}").select_option(label="Reception")
    row.get_by_role("button", name="Assign agent").click()
    expect(page.get_by_role("status")).to_have_text(
        f"{NUMBER} is answered by Reception, at its latest version."
    )
    expect(number_row(page).get_by_role("link", name="Reception")).to_be_visible()
    expect(number_row(page).get_by_label(f"Agent for {NUMBER}")).to_have_value(agent_id)
    shot("assigned")
    assert agent_of_number(client, headers, number.id) == agent_id

    number_row(page).get_by_label(f"Agent for {NUMBER}").select_option(label="No agent")
    number_row(page).get_by_role("button", name="Assign agent").click()
    expect(page.get_by_role("status")).to_have_text(
        f"{NUMBER} has no agent now: it answers no calls."
    )
    expect(number_row(page).get_by_role("link", name="Reception")).to_have_count(0)
    expect(number_row(page).get_by_label(f"Agent for {NUMBER}")).to_have_value("")
    shot("unassigned")
    assert agent_of_number(client, headers, number.id) is None


def test_a_viewer_sees_the_numbers_without_assigning(page, shot, signed_in, did):
    signed_in("viewer")
    open_numbers(page, shot)
    row = page.get_by_role("row").filter(has=page.get_by_role("cell", name=did, exact=True))
    expect(row.get_by_role("link", name="Reception")).to_be_visible()
    expect(page.get_by_role("button", name="Assign agent")).to_have_count(0)
    expect(page.get_by_role("combobox")).to_have_count(0)
