"""A campaign in a real browser: created from an uploaded CSV, progressing as the demo runtime
(flask calls dispatch-demo) answers its calls, paused and resumed, its results read on its
page. The server sweeps inline (no Redis), as `make run` does."""

import re

import pytest
from playwright.sync_api import Page, expect

from app.models import Campaign
from tests.system.browser.conftest import heading, menu, row
from tests.system.workers import wait_until

CONTACTS = ["+6281300000001", "+6281300000002", "+6281300000003"]
CSV = "to,name\n" + "".join(f"{to},{name}\n" for to, name in zip(CONTACTS, "ABC", strict=True))


@pytest.fixture
def server_settings():
    return {"SWEEP_INTERVAL": "0.2"}


def progress(page: Page) -> str:
    return page.get_by_text(re.compile(r"^Progress: ")).inner_text()


def reload_when_done(page: Page, done: int, timeout_s: float = 30) -> None:
    """Wait until done of the campaign's contacts are done, then reload its page (a person
    pressing reload once), which shows it."""

    def reached() -> bool:
        campaign = Campaign.get()
        return campaign.completed_count + campaign.failed_count >= done

    wait_until(reached, timeout_s, f"fewer than {done} contacts were done")
    page.reload()
    expect(page.get_by_text(re.compile(rf"^Progress: {done} of "))).to_be_visible()


def test_a_csv_campaign_progresses_is_paused_and_resumed_and_shows_its_results(
    page, shot, signed_in, did, workers, tmp_path
):
    signed_in("owner")
    menu(page).get_by_role("link", name="Campaigns").click()
    expect(heading(page)).to_have_text("Campaigns")
    shot("campaigns")
    page.get_by_role("link", name="New campaign").click()
    expect(heading(page)).to_have_text("New campaign")
    shot("new-campaign")
    path = tmp_path / "people.csv"
    path.write_text(CSV)
    page.get_by_label("Name").fill("Check-up reminders")
    page.get_by_label("Upload a CSV file").set_input_files(path)
    page.get_by_role("button", name="Create campaign").click()
    expect(heading(page)).to_have_text("Check-up reminders")
    expect(page.get_by_text("created with 3 contacts")).to_be_visible()
    shot("campaign-created")
    # The demo runtime answers each call and talks for 2 s; one call at a time.
    workers.start_flask(
        "calls", "dispatch-demo", "--answer-rate", "1", "--seconds", "2", "--interval", "0.2"
    )
    reload_when_done(page, 1)
    shot("campaign-progress")
    page.get_by_role("button", name="Pause").click()
    expect(page.get_by_text("paused: no new calls are placed")).to_be_visible()
    shot("campaign-paused")
    campaign = Campaign.get()
    # The call in progress ends; no new one is placed while it is paused.
    page.wait_for_timeout(3000)
    page.reload()
    shot("campaign-paused-later")
    paused_at = progress(page)
    assert Campaign.get_by_id(campaign.id).in_progress_count == 0
    assert paused_at in ("Progress: 1 of 3 contacts done", "Progress: 2 of 3 contacts done")
    page.get_by_role("button", name="Resume").click()
    expect(page.get_by_text("resumed")).to_be_visible()
    shot("campaign-resumed")
    reload_when_done(page, 3)
    expect(page.locator("#campaign-status")).to_have_text("completed")
    for to, name in zip(CONTACTS, "ABC", strict=True):
        contact = row(page, to)
        expect(contact).to_contain_text("completed")
        expect(contact).to_contain_text(f"name={name}")
        expect(contact).to_contain_text("answered")
    shot("campaign-completed")
    row(page, CONTACTS[0]).get_by_role("link", name=f"Call 1 to {CONTACTS[0]}").click()
    expect(page.get_by_text("outbound").first).to_be_visible()
    shot("campaign-call")
