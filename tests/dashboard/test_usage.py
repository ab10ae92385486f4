"""Usage: this month's calls, minutes and costs by day and by component, and the calls in
progress against the limit."""

import re
from datetime import timedelta

from app.models import Call
from app.services import tenants as tenant_service
from app.util import utcnow
from tests.call_flow import answer, end_body, report_end, start, whole_call
from tests.helpers import ACTOR


def usage_page(client, query=""):
    page = client.get(f"/dashboard/usage{query}")
    assert page.status_code == 200
    return page.get_data(True)


def figure(text, name):
    match = re.search(rf"<dt>{re.escape(name)}</dt><dd>(.*?)</dd>", text, re.S)
    assert match, name
    return re.sub(r"<[^>]+>", "", match.group(1)).strip()


def row_of(text, header):
    match = re.search(rf'<th scope="row">{re.escape(header)}</th>(.*?)</tr>', text, re.S)
    assert match, header
    return [cell.strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", match.group(1), re.S)]


def test_usage_is_in_the_menu_with_its_heading(signed_in):
    menu = signed_in.get("/dashboard/").get_data(True)
    assert '<a href="/dashboard/usage"' in menu
    text = usage_page(signed_in)
    assert text.count("<h1>") == 1 and "<h1>Usage</h1>" in text
    month = utcnow().strftime("%B %Y")
    assert f"Calls in {month}" in text and f"By day, {month}" in text


def test_a_new_tenant_sees_zeros_and_its_limits(signed_in):
    text = usage_page(signed_in)
    assert figure(text, "Calls in progress") == "0 of 20"
    assert figure(text, "API rate limit") == "300 requests/min"
    assert figure(text, f"AI cost in {utcnow():%B %Y}") == "IDR 0"
    # No wall of zero rows: the month's chart, and a line saying no day had calls.
    assert f"No calls in {utcnow():%B %Y}." in text
    first = utcnow().date().replace(day=1)
    assert f'<rect data-day="{first.isoformat()}"' in text
    assert f'data-day="{(first - timedelta(days=1)).isoformat()}"' not in text
    assert '<table aria-labelledby="by-day">' not in text


def test_the_month_picker_shows_an_earlier_month_and_only_days_with_calls(
    signed_in, runtime_headers, did
):
    whole_call(signed_in, runtime_headers, did)
    text = usage_page(signed_in)
    today = utcnow().date()
    assert len(re.findall(r'<tr data-day="', text.split('id="by-day"')[1])) == 1
    assert row_of(text, f"All of {today:%B %Y}")[0] == "1"
    earlier = (today.replace(day=1) - timedelta(days=1)).replace(day=1)
    assert f'<option value="{earlier:%Y-%m}">{earlier:%B %Y}</option>' in text
    page = signed_in.get(f"/dashboard/usage?month={earlier:%Y-%m}").get_data(True)
    assert f"By day, {earlier:%B %Y}" in page and f"No calls in {earlier:%B %Y}." in page
    assert f'<rect data-day="{earlier.isoformat()}"' in page
    assert "By day, " + f"{today:%B %Y}" in usage_page(signed_in, "?month=junk")


def test_calls_show_by_day_and_by_component(signed_in, runtime_headers, did):
    call_id = start(signed_in, runtime_headers, did).json["id"]
    answer(signed_in, runtime_headers, call_id)
    costs = {"llm": 1200, "stt": 300, "tts": 400, "telephony": 100}
    body = end_body(talkTimeSeconds=125, costBreakdown=costs)
    del body["aiCostIdr"]
    assert report_end(signed_in, runtime_headers, call_id, body).status_code == 200
    start(signed_in, runtime_headers, did)  # in progress
    text = usage_page(signed_in)
    month = f"{utcnow():%B %Y}"
    assert figure(text, f"Calls in {month}").startswith("2")
    assert "1 answered" in text
    assert figure(text, f"Billed minutes in {month}") == "3 min"
    assert figure(text, f"AI cost in {month}") == "IDR 2,000"
    assert figure(text, "Calls in progress") == "1 of 20"
    assert row_of(text, "Language model") == ["1,200", "60%"]
    assert row_of(text, "Telephony") == ["100", "5%"]
    assert row_of(text, "Other") == ["0", "0%"]
    assert row_of(text, "Total")[0] == "2,000"
    by_day = text.split('id="by-day"')[1]
    assert row_of(by_day, utcnow().date().isoformat()) == ["2", "1", "3", "2,000"]
    assert Call.select().count() == 2


def test_the_limit_shown_is_the_tenants(signed_in, tenant):
    tenant_service.set_plan(actor=ACTOR, tenant=tenant, plan="starter", concurrent_calls=7)
    assert figure(usage_page(signed_in), "Calls in progress") == "0 of 7"


def test_a_viewer_sees_usage(client, viewer):
    from tests.dashboard.conftest import sign_in

    sign_in(client, viewer.email)
    assert "<h1>Usage</h1>" in usage_page(client)


def test_usage_needs_a_signed_in_user(client):
    page = client.get("/dashboard/usage")
    assert page.status_code == 302 and "/dashboard/sign-in" in page.headers["Location"]
