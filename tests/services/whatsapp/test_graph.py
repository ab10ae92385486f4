"""The Graph API client against the stand-in on 127.0.0.1: pages, Meta's errors, deadlines."""

import threading
import time

import pytest

from app.services.whatsapp import graph
from tests.fake_graph import number

TOKEN = "EAAG-test-token-1234"


def numbers(count: int) -> list[dict]:
    return [number(f"10{i}", f"+62 811-000-{i:04d}") for i in range(count)]


def test_every_page_is_read_with_the_cursor_and_the_bearer_token(app, fake_graph):
    fake_graph.add_waba("waba1", TOKEN, numbers(5))
    listed = graph.phone_numbers("ten_a", "waba1", token=TOKEN)
    assert [item["id"] for item in listed] == ["100", "101", "102", "103", "104"]
    requests = fake_graph.requests
    assert len(requests) == 3  # pages of 2
    assert fake_graph.tokens_seen() == [TOKEN] * 3
    assert "after=2" in requests[1].path and "after=4" in requests[2].path
    assert all("fields=id%2Cdisplay_phone_number" in request.path for request in requests)


def test_a_paging_link_pointing_elsewhere_is_not_followed(app, fake_graph):
    fake_graph.add_waba("waba1", TOKEN, numbers(3))
    fake_graph.next_link = "http://127.0.0.2:9/steal?after=2"
    listed = graph.phone_numbers("ten_a", "waba1", token=TOKEN)
    assert len(listed) == 3  # the cursor, against WHATSAPP_GRAPH_URL
    assert all(request.path.startswith("/v23.0/waba1/") for request in fake_graph.requests)


@pytest.mark.parametrize(
    ("failure", "status", "code"),
    [
        ("auth", 422, "whatsapp_auth_failed"),
        ("server", 502, "whatsapp_unavailable"),
        ("rate", 429, "whatsapp_rate_limited"),
        ("unknown_waba", 422, "whatsapp_rejected"),
    ],
)
def test_metas_errors_become_the_documented_ones(app, fake_graph, failure, status, code):
    fake_graph.add_waba("waba1", TOKEN, numbers(1))
    fake_graph.fail[TOKEN] = failure
    with pytest.raises(graph.GraphError) as raised:
        graph.phone_numbers("ten_a", "waba1", token=TOKEN)
    assert (raised.value.status, raised.value.code) == (status, code)
    assert TOKEN not in str(raised.value.message) + str(raised.value.details)


def test_a_slow_or_unreachable_graph_is_unavailable_within_the_deadline(app, fake_graph):
    app.config["WHATSAPP_GRAPH_TIMEOUT"] = 0.5
    fake_graph.add_waba("waba1", TOKEN, numbers(1))
    fake_graph.fail[TOKEN] = ("slow", 3)
    started = time.monotonic()
    with pytest.raises(graph.GraphError) as raised:
        graph.phone_numbers("ten_a", "waba1", token=TOKEN)
    assert raised.value.code == "whatsapp_unavailable"
    assert time.monotonic() - started < 2
    app.config["WHATSAPP_GRAPH_URL"] = "http://127.0.0.1:9/v23.0"  # nothing listens there
    with pytest.raises(graph.GraphError) as raised:
        graph.phone_numbers("ten_a", "waba1", token=TOKEN)
    assert raised.value.code == "whatsapp_unavailable"


def test_a_tenant_has_its_share_of_requests_and_no_more(app, fake_graph):
    """While one tenant's requests wait on a slow Meta, its next one is whatsapp_busy at once
    and another tenant's goes through."""
    app.config["WHATSAPP_GRAPH_TIMEOUT"] = 3.0
    fake_graph.add_waba("slow", "slow-token", numbers(1))
    fake_graph.add_waba("quick", TOKEN, numbers(1))
    fake_graph.fail["slow-token"] = ("slow", 1.5)

    def hold() -> None:
        with app.app_context():
            graph.request("ten_slow", "GET", "slow/phone_numbers", token="slow-token")

    holders = [threading.Thread(target=hold) for _ in range(2)]
    for thread in holders:
        thread.start()
    time.sleep(0.4)
    with pytest.raises(graph.GraphError) as raised:
        graph.request("ten_slow", "GET", "slow/phone_numbers", token="slow-token")
    assert (raised.value.status, raised.value.code) == (429, "whatsapp_busy")
    started = time.monotonic()
    assert graph.phone_numbers("ten_quick", "quick", token=TOKEN)[0]["id"] == "100"
    assert time.monotonic() - started < 1
    for thread in holders:
        thread.join()
