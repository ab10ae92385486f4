"""Dashboard functions: an agent's functions with their timeout, each one's page to edit it,
and its test, sent to a real endpoint on 127.0.0.1."""

import hashlib
import hmac
import json
import re
import socket
from urllib.parse import urlsplit

import pytest

from app.models import Event, Function, FunctionInvocation
from tests.dashboard.audit import changes
from tests.dashboard.conftest import csrf_token, sign_in
from tests.receiver import Answer, Receiver

AGENTS = "/dashboard/agents"
SECRET = "dashboard-function-secret"
PARAMETERS = {
    "type": "object",
    "properties": {
        "date": {"type": "string", "description": "The day, as YYYY-MM-DD."},
        "people": {"type": "integer", "description": "How many."},
        "room": {"type": "string", "description": "Which room.", "enum": ["blue", "red"]},
    },
    "required": ["date"],
}


def answer(request):
    path = urlsplit(request.path).path
    if path == "/sleep":
        return Answer(delay=3, body=b"{}")
    if path == "/fail":
        return Answer(status=503, body=b"busy")
    body = {"free": True, "note": "<script>alert(1)</script>", "got": request.json()}
    return Answer(body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})


@pytest.fixture
def endpoint():
    with Receiver(answer) as receiver:
        yield receiver


def define(client, headers, agent_id, url, **fields):
    body = {
        "name": "book_slot",
        "description": "Books a slot.",
        "endpoint": url,
        "parameters": PARAMETERS,
        "secret": SECRET,
        **fields,
    }
    response = client.post(f"/api/v1/agents/{agent_id}/functions", json=body, headers=headers)
    assert response.status_code == 201, response.get_data(as_text=True)
    return response.json


def text(response) -> str:
    return response.get_data(as_text=True)


def test_an_agents_functions_show_their_timeout_and_a_test_button(
    signed_in, headers, agent_id, endpoint
):
    define(signed_in, headers, agent_id, endpoint.url + "/book", timeoutMs=1500)
    body = text(signed_in.get(f"{AGENTS}/{agent_id}/functions"))
    assert '<td class="nowrap">1500 ms</td>' in body
    test_path = f"{AGENTS}/{agent_id}/functions/book_slot/test"
    assert f'<a class="button" href="{test_path}">Test</a>' in body
    assert f'href="{AGENTS}/{agent_id}/functions/book_slot"><code>book_slot</code></a>' in body


def test_the_add_function_form_takes_a_timeout(signed_in, post, headers, agent_id):
    form = {
        "name": "book_slot",
        "description": "Books a slot.",
        "endpoint": "https://clinic.example.com/book",
        "method": "POST",
        "parameters": json.dumps(PARAMETERS),
        "timeoutMs": "800",
    }
    page = text(signed_in.get(f"{AGENTS}/{agent_id}/functions"))
    assert re.search(r'id="function-timeoutMs" name="timeoutMs" value="5000"', page)
    assert post(f"{AGENTS}/{agent_id}/functions", form).status_code == 201
    [listed] = signed_in.get(f"/api/v1/agents/{agent_id}/functions", headers=headers).json[
        "functions"
    ]
    assert listed["timeoutMs"] == 800
    response = post(f"{AGENTS}/{agent_id}/functions", {**form, "name": "b", "timeoutMs": "9000"})
    assert response.status_code == 422
    assert "Enter a number from 500 to 5000." in text(response)
    assert 'id="function-timeoutMs-error"' in text(response)


def test_a_functions_page_shows_its_settings_to_edit(signed_in, headers, agent_id, endpoint):
    define(signed_in, headers, agent_id, endpoint.url + "/book", method="GET", timeoutMs=1500)
    page = signed_in.get(f"{AGENTS}/{agent_id}/functions/book_slot")
    assert page.status_code == 200
    body = text(page)
    assert "<h1>Function book_slot</h1>" in body
    assert 'name="timeoutMs" value="1500"' in body
    assert f'name="endpoint" value="{endpoint.url}/book"' in body
    assert '<option value="GET" selected>GET</option>' in body
    assert "The day, as YYYY-MM-DD." in body
    assert SECRET not in body


def test_saving_the_timeout_changes_only_the_timeout(signed_in, post, headers, agent_id, endpoint):
    before = define(signed_in, headers, agent_id, endpoint.url + "/book")
    path = f"{AGENTS}/{agent_id}/functions/book_slot"
    response = post(path, {"timeoutMs": "700"})
    assert response.status_code == 302 and response.headers["Location"] == path
    assert "Function book_slot saved." in text(signed_in.get(path))
    [after] = signed_in.get(f"/api/v1/agents/{agent_id}/functions", headers=headers).json[
        "functions"
    ]
    assert {key for key in after if after[key] != before[key]} == {"timeoutMs"}
    assert after["timeoutMs"] == 700
    assert Function.get().signing_secret == SECRET
    function_id = Function.get().id
    assert changes() == [
        ("function.updated", function_id, {"agentId": agent_id, "fields": ["timeoutMs"]})
    ]


def test_saving_the_whole_unchanged_form_changes_nothing(
    signed_in, post, headers, agent_id, endpoint
):
    define(signed_in, headers, agent_id, endpoint.url + "/book")
    updated_at = Function.get().updated_at
    path = f"{AGENTS}/{agent_id}/functions/book_slot"
    form = {
        "description": "Books a slot.",
        "endpoint": endpoint.url + "/book",
        "method": "POST",
        "parameters": json.dumps(PARAMETERS, indent=2),
        "timeoutMs": "5000",
    }
    assert post(path, form).status_code == 302
    assert "Nothing to save: no field was changed." in text(signed_in.get(path))
    assert Function.get().updated_at == updated_at
    assert changes() == []


def test_the_add_function_form_refuses_a_definition_past_64_kib(signed_in, post, agent_id):
    enum = [f"{n:03d}".ljust(256, "x") for n in range(100)]
    properties = {f"p{n}": {"type": "string", "description": "x", "enum": enum} for n in range(3)}
    form = {
        "name": "book_slot",
        "description": "Books a slot.",
        "endpoint": "https://clinic.example.com/book",
        "method": "POST",
        "parameters": json.dumps({"type": "object", "properties": properties}),
        "timeoutMs": "800",
    }
    response = post(f"{AGENTS}/{agent_id}/functions", form)
    assert response.status_code == 422
    assert "at most 65,536 (64 KiB)" in text(response)
    assert 'id="function-parameters-error"' in text(response)
    assert Function.select().count() == 0


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("timeoutMs", "499", "Enter a number from 500 to 5000."),
        ("timeoutMs", "5s", "Enter a whole number."),
        ("method", "TRACE", "Choose one of GET, POST, PUT, PATCH, DELETE."),
        ("parameters", "{not json", "Not valid JSON (line 1, column 2)."),
        ("endpoint", "ftp://clinic.example.com/x", "https"),
    ],
)
def test_saving_a_bad_field_shows_its_message_and_changes_nothing(
    signed_in, post, headers, agent_id, endpoint, field, value, message
):
    before = define(signed_in, headers, agent_id, endpoint.url + "/book")
    response = post(f"{AGENTS}/{agent_id}/functions/book_slot", {field: value})
    assert response.status_code == 422
    body = text(response)
    assert message in body and f'id="function-{field}-error"' in body
    [after] = signed_in.get(f"/api/v1/agents/{agent_id}/functions", headers=headers).json[
        "functions"
    ]
    assert after == {key: value for key, value in before.items() if key != "signingSecret"}


def test_the_test_form_starts_from_an_example_of_the_parameters(
    signed_in, headers, agent_id, endpoint
):
    define(signed_in, headers, agent_id, endpoint.url + "/book")
    page = signed_in.get(f"{AGENTS}/{agent_id}/functions/book_slot/test")
    assert page.status_code == 200
    body = text(page)
    assert "<h1>Test book_slot</h1>" in body
    example = re.search(r'<textarea id="test-parameters" name="parameters"[^>]*>\n(.*?)</textarea>',
                        body, re.S).group(1)  # fmt: skip
    assert json.loads(example.replace("&#34;", '"')) == {"date": "", "people": 0, "room": "blue"}
    assert endpoint.requests == []


def send_test(post, agent_id, parameters):
    return post(f"{AGENTS}/{agent_id}/functions/book_slot/test", {"parameters": parameters})


def test_a_test_sends_the_signed_request_and_shows_the_answer(
    signed_in, post, headers, agent_id, endpoint
):
    define(signed_in, headers, agent_id, endpoint.url + "/book")
    response = send_test(post, agent_id, '{"date": "2026-11-23", "people": 2}')
    assert response.status_code == 200
    [request] = endpoint.requests
    assert request.json() == {
        "callId": "call_test",
        "functionName": "book_slot",
        "parameters": {"date": "2026-11-23", "people": 2},
    }
    expected = hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Service-Signature"] == f"sha256={expected}"
    body = text(response)
    assert '<dd><span class="ok">ok</span></dd>' in body
    assert "<dt>Status code</dt>\n    <dd>200</dd>" in body
    assert re.search(r"<dd>\d+ ms of the 5000 ms budget</dd>", body)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body and "<script>alert" not in body
    assert '"2026-11-23"' not in body.split('<pre class="json">')[0].split("</textarea>")[1]
    assert "&#34;date&#34;: &#34;2026-11-23&#34;" in body.split('<pre class="json">')[1]
    # The parameters sent stay in the box, to send again.
    assert "{&#34;date&#34;: &#34;2026-11-23&#34;, &#34;people&#34;: 2}</textarea>" in body
    assert FunctionInvocation.select().count() == 0
    assert Event.select().count() == 0
    assert changes() == []  # a test changes nothing: no audit entry


def test_a_test_shows_an_error_code_with_the_endpoints_status(
    signed_in, post, headers, agent_id, endpoint
):
    define(signed_in, headers, agent_id, endpoint.url + "/fail")
    body = text(send_test(post, agent_id, '{"date": "2026-11-23"}'))
    assert '<span class="bad">function_http_error</span>: The endpoint answered HTTP 503.' in body
    assert "<dt>Status code</dt>\n    <dd>503</dd>" in body
    assert '<pre class="json">' not in body


def test_a_slow_endpoint_shows_a_timeout_within_its_budget(
    signed_in, post, headers, agent_id, endpoint
):
    define(signed_in, headers, agent_id, endpoint.url + "/sleep", timeoutMs=500)
    body = text(send_test(post, agent_id, '{"date": "2026-11-23"}'))
    assert "function_timeout</span>: The function did not answer within 0.5 s." in body
    assert "<dt>Status code</dt>\n    <dd>none</dd>" in body
    latency = int(re.search(r"<dd>(\d+) ms of the 500 ms budget</dd>", body).group(1))
    assert latency <= 500 + 500


def test_parameters_that_do_not_fit_are_shown_as_a_live_call_would_get_them(
    signed_in, post, headers, agent_id, endpoint
):
    define(signed_in, headers, agent_id, endpoint.url + "/book")
    response = send_test(post, agent_id, '{"people": "two"}')
    assert response.status_code == 200
    body = text(response)
    assert '<span class="bad">invalid_parameters</span>' in body
    assert "date: Missing required parameter." in body
    assert endpoint.requests == []


def test_an_emptied_box_sends_no_parameters(signed_in, post, headers, agent_id, endpoint):
    define(signed_in, headers, agent_id, endpoint.url + "/book", parameters={"type": "object"})
    body = text(send_test(post, agent_id, "  \r\n"))
    assert '<span class="ok">ok</span>' in body
    assert endpoint.requests[0].json()["parameters"] == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{not json", "Not valid JSON (line 1, column 2)."),
        ('["2026-11-23"]', "Enter a JSON object, in braces: {…}."),
        ('"2026-11-23"', "Enter a JSON object, in braces: {…}."),
        ("[" * 40 + "]" * 40, "nested more than 32 levels"),
    ],
)
def test_a_box_that_is_not_a_json_object_shows_its_message(
    signed_in, post, headers, agent_id, endpoint, value, message
):
    define(signed_in, headers, agent_id, endpoint.url + "/book")
    response = send_test(post, agent_id, value)
    assert response.status_code == 422
    body = text(response)
    assert message in body and 'id="test-parameters-error"' in body
    assert endpoint.requests == []
    assert changes() == []


def test_a_refused_connection_is_unreachable(signed_in, post, headers, agent_id):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    define(signed_in, headers, agent_id, f"http://127.0.0.1:{port}/book")
    body = text(send_test(post, agent_id, '{"date": "x"}'))
    assert "function_unreachable</span>: The endpoint is unreachable" in body


def test_a_viewer_sees_the_functions_but_neither_tests_nor_edits_them(
    client, viewer, headers, agent_id, endpoint
):
    define(client, headers, agent_id, endpoint.url + "/book")
    sign_in(client, viewer.email)
    agent_page = text(client.get(f"{AGENTS}/{agent_id}/functions"))
    assert "book_slot" in agent_page and ">Test</a>" not in agent_page
    function_page = text(client.get(f"{AGENTS}/{agent_id}/functions/book_slot"))
    assert '<fieldset class="plain" disabled>' in function_page
    assert ">Test</a>" not in function_page and "<button" not in function_page.split("</header>")[1]
    test_path = f"{AGENTS}/{agent_id}/functions/book_slot/test"
    assert client.get(test_path).status_code == 403
    token = csrf_token(client.get("/dashboard/"))
    for path, data in [
        (test_path, {"parameters": '{"date": "x"}'}),
        (f"{AGENTS}/{agent_id}/functions/book_slot", {"timeoutMs": "500"}),
    ]:
        assert client.post(path, data={**data, "csrf_token": token}).status_code == 403
    assert endpoint.requests == []
    assert Function.get().timeout_ms == 5000


@pytest.mark.parametrize("suffix", ["", "/test"])
def test_a_post_without_its_csrf_token_is_refused(signed_in, headers, agent_id, endpoint, suffix):
    define(signed_in, headers, agent_id, endpoint.url + "/book")
    path = f"{AGENTS}/{agent_id}/functions/book_slot{suffix}"
    response = signed_in.post(path, data={"parameters": '{"date": "x"}', "timeoutMs": "500"})
    assert response.status_code == 400
    assert "This form has expired" in text(response)
    assert endpoint.requests == []
    assert Function.get().timeout_ms == 5000


def test_an_unknown_function_is_404(signed_in, post, agent_id):
    for suffix in ("", "/test"):
        path = f"{AGENTS}/{agent_id}/functions/nope{suffix}"
        assert signed_in.get(path).status_code == 404
        assert post(path, {"parameters": "{}"}).status_code == 404


def test_rotating_a_functions_secret_shows_the_new_one_once_and_records_it(
    signed_in, post, headers, agent_id, endpoint
):
    define(signed_in, headers, agent_id, endpoint.url + "/slots")
    path = f"/dashboard/agents/{agent_id}/functions/book_slot/rotate-secret"
    confirm = signed_in.get(path)
    assert confirm.status_code == 200 and "X-Service-Signature-Previous" in text(confirm)
    response = post(path, {"overlapHours": "0"}, token_from=path)
    assert response.status_code == 200 and response.headers["Cache-Control"] == "no-store"
    function = Function.get()
    assert function.signing_secret.startswith("fsec_") and function.signing_secret != SECRET
    assert function.previous_secret_in_use() is None  # no overlap was chosen
    body = text(response)
    assert f'readonly value="{function.signing_secret}"' in body
    assert "The old secret no longer signs anything." in body
    page = text(signed_in.get(f"/dashboard/agents/{agent_id}/functions/book_slot"))
    assert function.signing_secret not in page and "Rotate secret" in page
    assert changes()[-1] == (
        "function.secret_rotated",
        function.id,
        {"agentId": agent_id, "overlapHours": 0, "previousSecretExpiresAt": None},
    )
