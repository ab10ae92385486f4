"""The WhatsApp page in a real browser: link an account through its form (the Graph API
stand-in on loopback), see its numbers, sync, and unlink after confirmation."""

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import TEST_SECRETS_KEY
from tests.fake_graph import number
from tests.system.browser.conftest import heading

TOKEN = "EAAG-browser-token-5150"


@pytest.fixture
def server_settings(graph_server):
    return {"SECRETS_KEY": TEST_SECRETS_KEY, "WHATSAPP_GRAPH_URL": graph_server.url}


def open_whatsapp(page: Page, shot) -> None:
    page.get_by_role("navigation", name="Main").get_by_role("link", name="WhatsApp").click()
    expect(heading(page)).to_have_text("WhatsApp Business accounts")
    shot("whatsapp")


def test_linking_syncing_and_unlinking_an_account(page, shot, signed_in, fake_graph):
    waba = fake_graph.add_waba("9501", TOKEN, [number("9511", "+62 811-950-0001")])
    signed_in("owner")
    open_whatsapp(page, shot)
    page.get_by_label("WhatsApp Business account id").fill("9501")
    page.get_by_label("Access token", exact=True).fill(TOKEN)
    page.get_by_label("App secret").fill("browser-app-secret")
    page.get_by_label("Label (optional)").fill("Jakarta")
    page.get_by_role("button", name="Link account").click()
    expect(page.get_by_role("status").first).to_have_text(
        "Linked 9501: 1 numbers added, 0 updated, 0 deactivated."
    )
    expect(page.get_by_role("cell", name="+628119500001")).to_be_visible()
    shot("linked")
    waba.numbers.append(number("9512", "+62 811-950-0002", rating="YELLOW"))
    page.get_by_role("button", name="Sync numbers from Meta").click()
    expect(page.get_by_role("cell", name="YELLOW")).to_be_visible()
    shot("synced")
    page.get_by_role("button", name="Unlink").click()
    expect(heading(page)).to_have_text("Unlink WhatsApp Business account 9501?")
    shot("unlink")
    page.get_by_role("button", name="Unlink").click()
    expect(page.get_by_text("No WhatsApp Business account is linked yet.")).to_be_visible()
    shot("unlinked")
    assert TOKEN not in page.content()
