"""Post-call analysis in a real browser: an agent's Analysis tab, whose preview follows the
plan as it is typed and whose Save makes the next version; and a call's analysis on its page,
with Run again."""

import json

from playwright.sync_api import Page, expect

from tests.system.browser.conftest import heading


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
