"""An agent's Versions tab in a real browser: what changed, the prompt's diff, and Restore
after its confirmation, which the API and the next call then show."""

from playwright.sync_api import expect

from tests.call_flow import start
from tests.system.browser.conftest import heading

PROMPT = "Be helpful."


def test_restoring_a_version_from_the_versions_tab(
    page, shot, signed_in, client, headers, runtime_headers, agent_id, did
):
    for prompt in ("Be brief.", "Be brief.\nAlways answer in English."):
        response = client.patch(
            f"/api/v1/agents/{agent_id}", json={"systemPrompt": prompt}, headers=headers
        )
        assert response.status_code == 200
    signed_in("owner")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Agents").click()
    expect(heading(page)).to_have_text("Agents")
    shot("agents")
    page.get_by_role("link", name="Reception", exact=True).click()
    expect(heading(page)).to_have_text("Reception")
    shot("agent")
    page.get_by_role("navigation", name="Agent").get_by_role("link", name="Versions").click()
    expect(page).to_have_title("Versions · Agent Reception · Voice Agent dashboard")
    rows = page.get_by_role("row")
    expect(rows).to_have_count(4)  # the header and three versions
    expect(rows.nth(1)).to_contain_text("Version 3")
    expect(rows.nth(1)).to_contain_text("(latest)")
    expect(rows.nth(1)).to_contain_text("prompt")
    expect(rows.nth(3)).to_contain_text("created")
    shot("versions")

    page.get_by_role("link", name="Version 3").click()
    expect(heading(page)).to_have_text("Version 3 of Reception")
    diff = page.get_by_label("Prompt changes against version 2")
    expect(diff).to_contain_text("+Always answer in English.")
    expect(page.get_by_role("link", name="Restore version 3")).to_have_count(0)
    shot("version-3")

    page.get_by_role("link", name="← Versions of Reception").click()
    expect(page).to_have_title("Versions · Agent Reception · Voice Agent dashboard")
    shot("versions-again")
    page.get_by_role("link", name="Version 1", exact=True).click()
    expect(heading(page)).to_have_text("Version 1 of Reception")
    shot("version-1")
    page.get_by_role("link", name="Restore version 1").click()
    expect(heading(page)).to_have_text("Restore version 1 of Reception")
    shot("confirm-restore")
    # Cancel first: nothing changes.
    page.get_by_role("link", name="Cancel").click()
    expect(heading(page)).to_have_text("Version 1 of Reception")
    shot("cancelled")
    assert client.get(f"/api/v1/agents/{agent_id}", headers=headers).json["version"] == 3

    page.get_by_role("link", name="Restore version 1").click()
    expect(heading(page)).to_have_text("Restore version 1 of Reception")
    shot("confirm-again")
    page.get_by_role("button", name="Restore version 1").click()
    expect(page.get_by_role("status")).to_have_text("Version 1 restored as version 4.")
    expect(page).to_have_title("Versions · Agent Reception · Voice Agent dashboard")
    expect(page.get_by_role("row").nth(1)).to_contain_text("Version 4")
    expect(page.get_by_role("row").nth(1)).to_contain_text("owner@acme.test")
    shot("restored")

    agent = client.get(f"/api/v1/agents/{agent_id}", headers=headers).json
    assert (agent["version"], agent["systemPrompt"]) == (4, PROMPT)
    session = start(client, runtime_headers, did).json["session"]
    assert (session["agentVersion"], session["systemPrompt"]) == (4, PROMPT)
