"""The Usage page in a real browser: this month's calls, minutes and costs by component and
by day, and the calls in progress against the limit."""

import re
from datetime import timedelta

import requests
from playwright.sync_api import expect

from app.util import utcnow
from tests.call_flow import CALLER, RUNTIME, backdate, end_body
from tests.system.browser.conftest import headed_row, heading, menu


def test_usage_shows_this_month_by_component_and_by_day(
    page, shot, signed_in, server, did, runtime_headers
):
    def runtime(path, **body):
        response = requests.post(
            f"{server}{RUNTIME}{path}", json=body, headers=runtime_headers, timeout=10
        )
        assert response.ok, response.text
        return response.json()

    ended = runtime("", did=did, callerNumber=CALLER)["id"]
    runtime(f"/{ended}/answered")
    report = {**end_body(talkTimeSeconds=125), "costBreakdown": {"llm": 1500, "telephony": 500}}
    del report["aiCostIdr"]
    backdate(ended, report["durationSeconds"])  # it lived as long as its end reports
    runtime(f"/{ended}/ended", **report)
    runtime("", did=did, callerNumber=CALLER)  # still in progress

    signed_in("viewer")
    menu(page).get_by_role("link", name="Usage").click()
    expect(heading(page)).to_have_text("Usage")
    month = f"{utcnow():%B %Y}"
    in_progress = page.locator(".figures div").filter(has_text="Calls in progress")
    expect(in_progress).to_contain_text("1 of 20")
    expect(page.get_by_role("meter", name="Calls in progress against the limit")).to_have_attribute(
        "value", "1"
    )
    expect(page.locator(".figures div").filter(has_text=f"AI cost in {month}")).to_contain_text(
        "IDR 2,000"
    )
    expect(
        page.locator(".figures div").filter(has_text=f"Billed minutes in {month}")
    ).to_contain_text("3 min")
    expect(headed_row(page, "Language model")).to_contain_text("1,500")
    expect(headed_row(page, "Language model")).to_contain_text("75%")
    expect(headed_row(page, "Telephony")).to_contain_text("500")
    by_day = page.get_by_role("table", name=f"By day, {month}")
    day = page.get_by_role("rowheader", name=utcnow().date().isoformat(), exact=True)
    today = by_day.get_by_role("row").filter(has=day)
    expect(today.get_by_role("cell")).to_have_text(["2", "1", "3", "2,000"])
    expect(by_day.get_by_role("row")).to_have_count(3)  # the header, the one day, the totals
    expect(page.get_by_role("img", name=re.compile(r"^Calls \(bars\)"))).to_be_visible()
    shot("usage")

    earlier = (utcnow().date().replace(day=1) - timedelta(days=1)).replace(day=1)
    page.get_by_label("Month (UTC)").select_option(label=f"{earlier:%B %Y}")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_text(f"No calls in {earlier:%B %Y}.")).to_be_visible()
    shot("usage-earlier-month")
