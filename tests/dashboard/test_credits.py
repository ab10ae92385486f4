"""Credits: the balance, its holds and lifetime counters, and the ledger with its filter."""

import re

import pytest

from app.services import billing
from tests.call_flow import start, whole_call
from tests.dashboard.conftest import sign_in
from tests.helpers import ACTOR


def figures(page) -> dict[str, str]:
    return dict(re.findall(r"<dt>([^<]+)</dt><dd>([^<]+)</dd>", page.get_data(True)))


def entries(page) -> list[list[str]]:
    """The ledger's rows: their cells' text."""
    body = re.search(r"<tbody>(.*?)</tbody>", page.get_data(True), re.S)
    if body is None:
        return []
    return [
        [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S)
    ]


def test_the_credits_page_shows_the_balance_as_the_api_does(
    signed_in, headers, runtime_headers, did
):
    whole_call(signed_in, runtime_headers, did)  # 2 minutes used
    start(signed_in, runtime_headers, did)  # holds 10 minutes while it rings
    page = signed_in.get("/dashboard/credits")
    assert page.status_code == 200
    text = page.get_data(True)
    assert text.count("<h1>") == 1 and "<h1>Credits</h1>" in text
    api = signed_in.get("/api/v1/credits", headers=headers).json
    assert figures(page) == {
        "Balance": f"{api['balanceMinutes']} min",
        "Reserved by calls in progress": f"{api['reservedMinutes']} min",
        "Available": f"{api['availableMinutes']} min",
        "Purchased, all time": f"{api['lifetimePurchasedMinutes']} min",
        "Used, all time": f"{api['lifetimeUsedMinutes']} min",
        "Low-balance threshold": f"{api['lowBalanceThresholdMinutes']} min",
    }
    assert figures(page)["Reserved by calls in progress"] == "10 min"
    assert figures(page)["Balance"] == "98 min"


def test_the_ledger_is_newest_first_and_a_usage_links_to_its_call(signed_in, runtime_headers, did):
    call_id = whole_call(signed_in, runtime_headers, did)
    page = signed_in.get("/dashboard/credits")
    rows = entries(page)
    assert [row[1:4] for row in rows] == [["usage", "-2", "98"], ["purchase", "+100", "100"]]
    assert rows[0][5] == call_id and rows[1][5] == ""
    assert f'<a href="/dashboard/calls/{call_id}">{call_id}</a>' in page.get_data(True)
    assert signed_in.get(f"/dashboard/calls/{call_id}").status_code == 200


def test_the_type_filter_and_pages_keep_each_other(signed_in, tenant):
    for minutes in range(1, 53):
        billing.grant(actor=ACTOR, tenant=tenant, minutes=minutes)
    page = signed_in.get("/dashboard/credits?type=purchase")
    rows = entries(page)
    assert len(rows) == 50 and rows[0][2] == "+52"
    text = page.get_data(True)
    assert '<option value="purchase" selected>' in text and '<label for="type">' in text
    following = re.search(r'<a href="([^"]+)" rel="next">Next</a>', text).group(1)
    assert following == "/dashboard/credits?type=purchase&amp;offset=50"
    second = signed_in.get(following.replace("&amp;", "&"))
    assert [row[2] for row in entries(second)] == ["+2", "+1"]
    previous = re.search(r'<a href="([^"]+)" rel="prev">Previous</a>', second.get_data(True))
    assert previous.group(1) == "/dashboard/credits?type=purchase"
    assert entries(signed_in.get("/dashboard/credits?type=refund")) == []
    assert "No entries of this type yet." in signed_in.get(
        "/dashboard/credits?type=refund"
    ).get_data(True)


@pytest.mark.parametrize("query", ["type=gift", "offset=-5", "offset=x"])
def test_a_bad_filter_shows_a_message_with_422(signed_in, query):
    page = signed_in.get(f"/dashboard/credits?{query}")
    assert page.status_code == 422
    text = page.get_data(True)
    assert "Some filters are not valid" in text and "<tbody>" not in text
    assert "Balance" in text  # the figures still show


def test_a_viewer_reads_the_credits(client, viewer, runtime_headers, did):
    whole_call(client, runtime_headers, did)
    assert sign_in(client, viewer.email).status_code == 302
    page = client.get("/dashboard/credits")
    assert page.status_code == 200 and len(entries(page)) == 2


def test_another_tenants_ledger_is_not_shown(signed_in, other_tenant):
    billing.grant(actor=ACTOR, tenant=other_tenant, minutes=777)
    page = signed_in.get("/dashboard/credits")
    assert entries(page) == [] and "777" not in page.get_data(True)
