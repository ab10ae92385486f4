"""Calls: the list with the API's filters and pages, and a call with its events and functions."""

import json
import re
from datetime import timedelta

import pytest

from app import queue
from app.services import billing
from app.services import tenants as tenant_service
from app.util import utcnow
from tests.call_flow import RUNTIME, answer, end_body, report_end, start, whole_call
from tests.dashboard.conftest import sign_in
from tests.helpers import ACTOR
from tests.receiver import Answer, Receiver

SECRET = "a-very-secret-value-1234"
RECORDING = "https://media.example.com/rec/17.wav?sig=a&b=c"


def listed(page) -> list[str]:
    """The ids of the calls a list page links to, in its order."""
    return re.findall(r'href="/dashboard/calls/(call_\w+)"', page.get_data(True))


def test_the_calls_page_lists_a_runtime_call_with_its_columns(signed_in, runtime_headers, did):
    call_id = whole_call(signed_in, runtime_headers, did)  # 95 s, 80 s of talk, 2 minutes
    page = signed_in.get("/dashboard/calls")
    assert page.status_code == 200
    text = page.get_data(True)
    assert text.count("<h1>") == 1 and "<h1>Calls</h1>" in text
    for header in ("Started (UTC)", "Status", "Direction", "Caller", "Callee", "Agent"):
        assert f'<th scope="col">{header}</th>' in text
    assert '<th scope="col">Hangup reason</th>' in text
    assert '<th scope="col" class="number">AI cost</th>' in text
    assert listed(page) == [call_id]
    row = re.search(r"<tbody>(.*?)</tbody>", text, re.S).group(1)
    cells = [cell.strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
    assert cells[1:11] == [
        "ended",
        "inbound",
        "+6281234567890",
        did,
        'Reception <span class="muted">version 1</span>',
        "1:35",
        "1:20",
        "2",
        "normal",
        "IDR 1,200",
    ]


def test_calls_are_newest_first_and_filtered_as_in_the_api(
    signed_in, runtime_headers, did, headers
):
    ended = whole_call(signed_in, runtime_headers, did)
    ringing = start(signed_in, runtime_headers, did).json["id"]
    assert listed(signed_in.get("/dashboard/calls")) == [ringing, ended]
    assert listed(signed_in.get("/dashboard/calls?status=ringing")) == [ringing]
    assert listed(signed_in.get("/dashboard/calls?status=ended&direction=inbound")) == [ended]
    assert listed(signed_in.get("/dashboard/calls?direction=outbound")) == []
    agent_id = signed_in.get(f"/api/v1/calls/{ended}", headers=headers).json["agentId"]
    assert listed(signed_in.get(f"/dashboard/calls?agentId={agent_id}")) == [ringing, ended]
    assert listed(signed_in.get("/dashboard/calls?agentId=agent_other")) == []
    tomorrow = (utcnow() + timedelta(days=1)).date()
    assert listed(signed_in.get(f"/dashboard/calls?to={tomorrow}")) == [ringing, ended]
    page = signed_in.get(f"/dashboard/calls?from={tomorrow}&status=")
    assert listed(page) == [] and "No calls match these filters." in page.get_data(True)
    # The same filters give the same calls as the API.
    api = signed_in.get("/api/v1/calls?status=ringing", headers=headers).json["calls"]
    assert [call["id"] for call in api] == [ringing]


def test_the_filter_form_has_labels_and_keeps_the_values(signed_in, did):
    text = signed_in.get("/dashboard/calls?status=ended&from=2026-01-02").get_data(True)
    for name in ("status", "from", "to", "agentId", "phoneNumberId", "direction"):
        assert f'<label for="{name}">' in text and f'id="{name}" name="{name}"' in text
    assert '<option value="ended" selected>' in text
    assert 'value="2026-01-02"' in text
    assert '<form method="get"' in text


def test_pages_of_50_link_to_each_other_keeping_the_filters(
    signed_in, runtime_headers, did, tenant
):
    billing.grant(actor=ACTOR, tenant=tenant, minutes=1000)
    tenant_service.set_plan(actor=ACTOR, tenant=tenant, plan="business", concurrent_calls=51)
    ids = [start(signed_in, runtime_headers, did).json["id"] for _ in range(51)]
    first = signed_in.get("/dashboard/calls?status=ringing")
    assert listed(first) == ids[:0:-1]
    text = first.get_data(True)
    assert "Previous" not in text
    following = re.search(r'<a href="([^"]+)" rel="next">Next</a>', text).group(1)
    assert following == "/dashboard/calls?status=ringing&amp;offset=50"
    second = signed_in.get(following.replace("&amp;", "&"))
    assert listed(second) == ids[:1]
    text = second.get_data(True)
    assert 'rel="next"' not in text
    previous = re.search(r'<a href="([^"]+)" rel="prev">Previous</a>', text).group(1)
    assert previous == "/dashboard/calls?status=ringing"
    assert "51–51 of 51" in text


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("from=yesterday", "Not an ISO 8601 date or timestamp."),
        ("to=2026-13-45", "Not an ISO 8601 date or timestamp."),
        ("status=lost", "Choose one of"),
        ("direction=sideways", "Choose one of"),
        ("offset=-1", "Enter a number from 0 to"),
        ("offset=many", "Enter a whole number."),
    ],
)
def test_a_bad_filter_shows_its_message_with_422(signed_in, query, message):
    page = signed_in.get(f"/dashboard/calls?{query}")
    assert page.status_code == 422
    text = page.get_data(True)
    assert message in text
    assert "Some filters are not valid" in text
    assert "<h1>Calls</h1>" in text and "<tbody>" not in text


def test_a_bad_from_is_shown_next_to_its_field_with_the_value_typed(signed_in):
    page = signed_in.get("/dashboard/calls?from=2026-02-30")
    assert page.status_code == 422
    text = page.get_data(True)
    assert 'value="2026-02-30"' in text and 'aria-describedby="from-error"' in text
    assert '<span class="field-error" id="from-error">Not an ISO 8601 date or timestamp.' in text


def define_function(client, headers, agent_id, url):
    response = client.post(
        f"/api/v1/agents/{agent_id}/functions",
        json={
            "name": "lookup_order",
            "description": "Look up an order.",
            "endpoint": url,
            "parameters": {
                "type": "object",
                "properties": {"orderId": {"type": "string", "description": "Order number."}},
                "required": ["orderId"],
            },
        },
        headers=headers,
    )
    assert response.status_code == 201, response.get_data(as_text=True)


def receive(request):
    if request.path == "/orders":
        body = {"status": "shipped", "orderId": request.json()["parameters"]["orderId"]}
        return Answer(body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return Answer(503, body=b"busy")  # the webhook


def test_the_detail_shows_the_events_their_deliveries_and_the_function_calls(
    app, signed_in, headers, runtime_headers, did, agent_id
):
    with Receiver(receive) as receiver:
        hook = signed_in.post(
            "/api/v1/webhooks",
            json={"url": receiver.url + "/hooks", "events": ["call.ended"], "secret": SECRET},
            headers=headers,
        )
        assert hook.status_code == 201
        define_function(signed_in, headers, agent_id, receiver.url + "/orders")
        call_id = start(signed_in, runtime_headers, did).json["id"]
        assert answer(signed_in, runtime_headers, call_id).status_code == 200
        called = signed_in.post(
            f"{RUNTIME}/{call_id}/function-calls",
            json={"functionName": "lookup_order", "parameters": {"orderId": "A-17"}},
            headers=runtime_headers,
        )
        assert called.json == {"result": {"status": "shipped", "orderId": "A-17"}}
        end = report_end(
            signed_in,
            runtime_headers,
            call_id,
            {
                "status": "ended",
                "durationSeconds": 95,
                "talkTimeSeconds": 80,
                "hangupReason": "normal",
                "hangupInitiator": "caller",
                "aiCostIdr": 1200,
            },
        )
        assert end.status_code == 200
        receiver.wait_for(2)
        assert queue.inline_worker(app).wait_idle(5)
    page = signed_in.get(f"/dashboard/calls/{call_id}")
    assert page.status_code == 200
    text = page.get_data(True)
    assert text.count("<h1>") == 1 and f"<h1>Call {call_id}</h1>" in text
    assert "Reception" in text and "+6281234567890" in text and "IDR 1,200" in text
    events = re.findall(r"<td>(call\.\w+|function\.called)<br>", text)
    assert events == ["call.started", "call.answered", "function.called", "call.ended"]
    # call.ended went to the webhook, which answered 503.
    delivery = re.search(
        r"<td>(?:<a [^>]*>)?" + re.escape(receiver.url + "/hooks") + r"(?:</a>)?</td>\s*"
        r"<td[^>]*>(\w+)</td>\s*"
        r"<td>(\d+)</td>\s*<td>(\d*)</td>",
        text,
    )
    assert delivery and delivery.groups() == ("pending", "1", "503")
    assert text.count("No webhook subscribed to it.") == 3
    # The function call: name, status, HTTP status, latency and result.
    row = re.search(r"<td[^>]*>[^<]*</td>\s*<td>lookup_order<br>(.*?)</tr>", text, re.S)
    assert row, text
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
    assert [cell.strip() for cell in cells[:2]] == ["succeeded", "200"]
    assert re.fullmatch(r"\d+ ms", cells[2].strip())
    assert "shipped" in cells[3] and "A-17" in cells[3]


def test_a_call_without_events_or_functions_says_so(signed_in, runtime_headers, did):
    call_id = whole_call(signed_in, runtime_headers, did)
    text = signed_in.get(f"/dashboard/calls/{call_id}").get_data(True)
    assert "The AI called no function during this call." in text
    assert text.count("No webhook subscribed to it.") == 3


def test_another_tenants_call_is_not_found(signed_in, other_tenant, other_headers, app):
    from app.services import agents as agent_service
    from app.services import phone_numbers as number_service

    agent = agent_service.create_agent(
        actor=ACTOR, tenant=other_tenant, name="Theirs", system_prompt="Hi."
    )
    number = number_service.add_number(
        actor=ACTOR, tenant=other_tenant, display_number="+6221555099"
    )
    number_service.assign_agent(
        actor=ACTOR, tenant=other_tenant, number_id=number.id, agent_id=agent.id
    )
    billing.grant(actor=ACTOR, tenant=other_tenant, minutes=10)
    from tests.conftest import RUNTIME_TOKEN

    theirs = whole_call(signed_in, {"Authorization": f"Bearer {RUNTIME_TOKEN}"}, "+6221555099")
    for path in (f"/dashboard/calls/{theirs}", "/dashboard/calls/call_nonexistent"):
        response = signed_in.get(path)
        assert response.status_code == 404
        assert "<h1>Not found</h1>" in response.get_data(True)
    assert listed(signed_in.get("/dashboard/calls")) == []


def test_a_viewer_reads_the_calls_and_a_call(client, viewer, runtime_headers, did):
    call_id = whole_call(client, runtime_headers, did)
    assert sign_in(client, viewer.email).status_code == 302
    assert listed(client.get("/dashboard/calls")) == [call_id]
    page = client.get(f"/dashboard/calls/{call_id}")
    assert page.status_code == 200 and f"<h1>Call {call_id}</h1>" in page.get_data(True)
    assert "<form" not in page.get_data(True).split("</header>", 1)[1]


def test_the_calls_pages_need_a_signed_in_user(client, runtime_headers, did):
    call_id = whole_call(client, runtime_headers, did)
    for path in ("/dashboard/calls", f"/dashboard/calls/{call_id}"):
        response = client.get(path)
        assert response.status_code == 302
        assert response.headers["Location"].startswith("/dashboard/sign-in?next=")


TURNS = [
    {"role": "agent", "text": "Halo, ada yang bisa dibantu?", "startMs": 0, "endMs": 2100},
    {"role": "caller", "text": "Saya mau <b>booking</b>\nbesok.", "startMs": 65_400},
    {"role": "agent", "text": "Baik."},
]


def conversation(text):
    """(time, speaker, text) of each row of the call page's conversation."""
    table = re.search(r'<table class="conversation".*?<tbody>(.*?)</tbody>', text, re.S)
    assert table, "no conversation"
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(1), re.S)
    return [
        tuple(cell.strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S))
        for row in rows
    ]


def test_the_detail_shows_the_conversation_recording_and_cost_breakdown(
    signed_in, runtime_headers, did
):
    call_id = start(signed_in, runtime_headers, did).json["id"]
    answer(signed_in, runtime_headers, call_id)
    path = f"{RUNTIME}/{call_id}/transcript"
    signed_in.post(path, json={"turns": TURNS[:2]}, headers=runtime_headers)
    signed_in.post(path, json={"turns": TURNS[2:]}, headers=runtime_headers)
    costs = {"llm": 1200, "stt": 300, "tts": 400, "telephony": 100}
    body = {**end_body(), "costBreakdown": costs, "recordingUrl": RECORDING}
    del body["aiCostIdr"]
    assert report_end(signed_in, runtime_headers, call_id, body).status_code == 200
    text = signed_in.get(f"/dashboard/calls/{call_id}").get_data(True)

    assert conversation(text) == [
        ("0:00", "Agent", "Halo, ada yang bisa dibantu?"),
        ("1:05", "Caller", "Saya mau &lt;b&gt;booking&lt;/b&gt;\nbesok."),
        ("", "Agent", "Baik."),
    ]
    link = RECORDING.replace("&", "&amp;")
    assert f'<a href="{link}" rel="noopener noreferrer">Listen to the recording</a>' in text
    breakdown = re.search(r'<table aria-labelledby="cost-breakdown">(.*?)</table>', text, re.S)
    rows = re.findall(
        r'<th scope="row">([^<]+)</th><td class="number">([^<]+)</td>', breakdown.group(1)
    )
    assert rows == [
        ("Language model", "1,200"),
        ("Speech to text", "300"),
        ("Text to speech", "400"),
        ("Telephony", "100"),
        ("Other", "0"),
        ("Total", "2,000"),
    ]


def test_a_call_without_turns_recording_or_breakdown_says_so(signed_in, runtime_headers, did):
    call_id = whole_call(signed_in, runtime_headers, did)
    text = signed_in.get(f"/dashboard/calls/{call_id}").get_data(True)
    assert "No conversation was reported for this call." in text
    assert "The runtime reported no cost breakdown for this call." in text
    assert "Listen to the recording" not in text
    # What the runtime did not report says so, never an empty cell.
    for label in ("Recording", "Provider call id", "Transcript summary", "Metadata"):
        assert re.search(rf"<dt>{label}</dt><dd><span class=\"muted\">none reported</span>", text)
    assert '<dt>Variables</dt><dd><span class="muted">none</span></dd>' in text


def test_the_detail_shows_the_calls_variables(signed_in, runtime_headers, did):
    call_id = start(signed_in, runtime_headers, did, variables={"name": "Budi"}).json["id"]
    text = signed_in.get(f"/dashboard/calls/{call_id}").get_data(True)
    assert "<dt>Variables</dt><dd><code>{&#34;name&#34;: &#34;Budi&#34;}</code></dd>" in text
