"""Hostile and broken input: each gets its documented 4xx and error body, never a 500.

Oversize, deeply nested or non-JSON bodies, invalid UTF-8, unpaired surrogates, NUL
characters, huge or negative paging, non-ISO dates, CR/LF header injection and SQL
metacharacters, on every route they apply to; in both database passes (PostgreSQL refuses
NUL characters that SQLite stores).
"""

import json

import pytest

from app.models import Agent
from tests.call_flow import RUNTIME, backdate, end_body, start
from tests.helpers import ACTOR, assert_error

BODY_ROUTES = [
    ("POST", "/api/v1/agents"),
    ("PATCH", "/api/v1/agents/agent_x"),
    ("POST", "/api/v1/agents/agent_x/functions"),
    ("PATCH", "/api/v1/agents/agent_x/functions/fn_x"),
    ("POST", "/api/v1/agents/agent_x/functions/fn_x/test"),
    ("POST", "/api/v1/agents/agent_x/functions/fn_x/rotate-secret"),
    ("POST", "/api/v1/phone-numbers/pn_x/assign-agent"),
    ("POST", "/api/v1/webhooks"),
    ("PATCH", "/api/v1/webhooks/wh_x"),
    ("POST", "/api/v1/webhooks/wh_x/replay"),
    ("POST", "/api/v1/webhooks/wh_x/rotate-secret"),
    ("POST", "/api/v1/calls"),
    ("POST", "/api/v1/campaigns"),
    ("POST", "/api/v1/whatsapp/accounts"),
    ("PATCH", "/api/v1/whatsapp/accounts/waa_x"),
    ("POST", "/api/v1/phone-numbers/pn_x/call-permission-requests"),
    ("POST", RUNTIME),
    ("POST", f"{RUNTIME}/call_x/answered"),
    ("POST", f"{RUNTIME}/call_x/transcript"),
    ("POST", f"{RUNTIME}/call_x/ended"),
    ("POST", f"{RUNTIME}/call_x/function-calls"),
    ("POST", "/internal/v1/dispatch"),
    ("POST", "/internal/v1/whatsapp/events"),
]
PAGED = ["/api/v1/calls", "/api/v1/credits/transactions", "/api/v1/webhooks/{webhook}/deliveries"]


@pytest.fixture
def auth(headers, runtime_headers):
    return lambda path: runtime_headers if path.startswith("/internal/") else headers


@pytest.fixture
def webhook_id(client, headers):
    body = {"url": "https://hooks.example.com/in", "events": ["call.ended"], "secret": "s" * 16}
    return client.post("/api/v1/webhooks", json=body, headers=headers).json["id"]


def send(client, method, path, auth, data, content_type="application/json"):
    return client.open(path, method=method, data=data, content_type=content_type, headers=auth)


def test_body_routes_are_all_listed(client):
    paths = client.get("/api/v1/openapi.json").json["paths"]
    documented = {
        (method.upper(), path)
        for path, operations in paths.items()
        for method, operation in operations.items()
        if "requestBody" in operation
    }
    placeholders = {"agent_x": "{agent_id}", "pn_x": "{number_id}", "wh_x": "{webhook_id}"}
    placeholders |= {"call_x": "{call_id}", "fn_x": "{name}", "waa_x": "{account_id}"}
    listed = set()
    for method, path in BODY_ROUTES:
        for example, placeholder in placeholders.items():
            path = path.replace(example, placeholder)
        listed.add((method, path))
    assert listed == documented


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
def test_body_over_one_mib_is_payload_too_large(client, auth, method, path):
    body = '{"name": "' + "x" * (1024 * 1024) + '"}'
    assert_error(send(client, method, path, auth(path), body), 413, "payload_too_large")


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
@pytest.mark.parametrize("nesting", ["[", '{"a":'])
def test_ten_thousand_levels_of_json_are_a_bad_request(client, auth, method, path, nesting):
    closing = "]" if nesting == "[" else "}"
    body = nesting * 10_000 + "1" * (nesting != "[") + closing * 10_000
    error = assert_error(send(client, method, path, auth(path), body), 400, "bad_request")
    assert "nested more than 32 levels" in error["message"]


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_nesting_is_allowed_to_32_levels(client, runtime_headers, did):
    call_id = start(client, runtime_headers, did).json["id"]
    body = {"functionName": "nothing", "parameters": nested(31)}  # the body is level 1
    ok = client.post(f"{RUNTIME}/{call_id}/function-calls", json=body, headers=runtime_headers)
    assert ok.status_code == 200, ok.get_data(as_text=True)
    body["parameters"] = nested(32)
    deep = client.post(f"{RUNTIME}/{call_id}/function-calls", json=body, headers=runtime_headers)
    assert_error(deep, 400, "bad_request")


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
@pytest.mark.parametrize("template", ['{"name": %s}', '{"a": [{"b": -%s}]}', "%s"])
def test_integer_beyond_pythons_digit_limit_is_a_bad_request(client, auth, method, path, template):
    body = template % ("9" * 5000)  # over int_max_str_digits (4,300 by default)
    error = assert_error(send(client, method, path, auth(path), body), 400, "bad_request")
    assert error["message"] == (
        "The request body is not valid JSON: it has an integer of more than 4,300 digits."
    )
    assert error["details"] == {}


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400", "-1E+400"])
def test_number_that_is_not_finite_is_a_bad_request(client, auth, method, path, number):
    body = '{"name": "a", "metadata": {"x": [N]}}'.replace("N", number)
    error = assert_error(send(client, method, path, auth(path), body), 400, "bad_request")
    assert "NaN, Infinity and numbers beyond a 64-bit float" in error["message"]


def test_largest_float_is_a_number(client, runtime_headers, did):
    call_id = start(client, runtime_headers, did).json["id"]
    body = json_text(end_body(metadata={}), "metadata", '{"x": 1.7e308, "y": -1e-400}')
    backdate(call_id, end_body()["durationSeconds"])
    response = send(client, "POST", f"{RUNTIME}/{call_id}/ended", runtime_headers, body)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.json["metadata"] == {"x": 1.7e308, "y": -0.0}


@pytest.mark.parametrize("method", ["POST", "PATCH"])
def test_huge_integer_out_of_a_fields_range_is_a_validation_error(client, headers, method):
    path = "/api/v1/agents" + ("/" + agent_id_of(client, headers) if method == "PATCH" else "")
    body = '{"name": "a", "systemPrompt": "b", "maxCallDurationMinutes": %s}' % ("9" * 4000)
    error = assert_error(send(client, method, path, headers, body), 422, "validation_error")
    assert set(error["details"]) == {"maxCallDurationMinutes"}


def agent_id_of(client, headers) -> str:
    body = {"name": "a", "systemPrompt": "b"}
    return client.post("/api/v1/agents", json=body, headers=headers).json["id"]


@pytest.mark.parametrize("field", ["durationSeconds", "talkTimeSeconds", "aiCostIdr"])
def test_huge_integer_in_a_runtime_field_is_a_validation_error(client, runtime_headers, did, field):
    call_id = start(client, runtime_headers, did).json["id"]
    body = json_text(end_body(), field, "-" + "9" * 4000)
    response = send(client, "POST", f"{RUNTIME}/{call_id}/ended", runtime_headers, body)
    assert set(assert_error(response, 422, "validation_error")["details"]) == {field}


def json_text(body: dict, field: str, number: str) -> str:
    """body as JSON with field's value written as number, text json.dumps would not write."""
    return json.dumps({**body, field: 0}).replace(f'"{field}": 0', f'"{field}": {number}', 1)


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/xml", "application/x-www-form-urlencoded"]
)
def test_non_json_body_is_unsupported_media_type(client, auth, method, path, content_type):
    response = send(client, method, path, auth(path), '{"name": "x"}', content_type)
    assert_error(response, 415, "unsupported_media_type")


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
def test_invalid_utf8_is_bad_request(client, auth, method, path):
    response = send(client, method, path, auth(path), b'{"name": "\xff\xfe"}')
    assert_error(response, 400, "bad_request")


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
def test_unpaired_surrogate_is_bad_request(client, auth, method, path):
    response = send(client, method, path, auth(path), '{"name": "\\udc80"}')
    error = assert_error(response, 400, "bad_request")
    assert "surrogate" in error["message"]


def test_surrogate_pair_is_a_character(client, headers):
    body = '{"name": "\\ud83d\\ude00", "systemPrompt": "x"}'
    response = client.post(
        "/api/v1/agents", data=body, content_type="application/json", headers=headers
    )
    assert response.status_code == 201
    assert response.json["name"] == "\U0001f600"


def test_nul_in_a_body_string_is_a_validation_error(client, headers):
    body = {"name": "a\x00b", "systemPrompt": "x", "toolsEnabled": ["ok"]}
    error = assert_error(
        client.post("/api/v1/agents", json=body, headers=headers), 422, "validation_error"
    )
    assert error["details"] == {"name": ["Must not contain NUL (U+0000) characters."]}


def test_nul_deep_in_a_runtime_body_names_its_field(client, runtime_headers, did):
    call_id = start(client, runtime_headers, did).json["id"]
    body = {"functionName": "f", "parameters": {"a": [{"b": "\x00"}]}}
    response = client.post(
        f"{RUNTIME}/{call_id}/function-calls", json=body, headers=runtime_headers
    )
    assert assert_error(response, 422, "validation_error")["details"] == {
        "parameters": ["Must not contain NUL (U+0000) characters."]
    }


@pytest.mark.parametrize(
    "path", ["/api/v1/agents/agent_%00", "/api/v1/calls/call_%00x", "/api/v1/webhooks/%00"]
)
def test_nul_in_an_id_is_not_found(client, headers, path):
    assert_error(client.get(path, headers=headers), 404, "not_found")


def test_nul_in_a_filter_is_a_validation_error(client, headers):
    error = assert_error(
        client.get("/api/v1/calls?agentId=agent_%00", headers=headers), 422, "validation_error"
    )
    assert set(error["details"]) == {"agentId"}


@pytest.mark.parametrize("path", PAGED)
@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=1000000000000000000000000000000", "limit"),
        ("limit=" + "9" * 5000, "limit"),
        ("offset=-" + "9" * 5000, "offset"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=-1", "limit"),
        ("limit=1e400", "limit"),
        ("limit=NaN", "limit"),
        ("limit=ten", "limit"),
        ("offset=1000000000000000000000000000000", "offset"),
        ("offset=-1", "offset"),
        ("offset=2147483648", "offset"),
        ("offset=0x10", "offset"),
    ],
)
def test_bad_paging_is_a_validation_error_naming_it(
    client, headers, webhook_id, path, query, field
):
    response = client.get(path.format(webhook=webhook_id) + "?" + query, headers=headers)
    error = assert_error(response, 422, "validation_error")
    assert set(error["details"]) == {field}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=" + "9" * 5000, "limit"),
        ("limit=1e400", "limit"),
        ("limit=NaN", "limit"),
        ("after=evt_' OR 1=1 --", "after"),
        ("after=" + "x" * 5000, "after"),
        ("after=evt_aaaaaaaaaaaaaaaaaaa%00", "after"),
        ("types=call.ended%00", "types"),
        ("types=" + "call.ended," * 500, "types"),  # a name left empty at the end
        ("types=%E2%80%AEcall.ended", "types"),
        ("types=call.ended' OR 1=1 --", "types"),
    ],
)
def test_event_log_parameters_are_checked(client, headers, query, field):
    error = assert_error(
        client.get("/api/v1/events?" + query, headers=headers), 422, "validation_error"
    )
    assert field in error["details"]


@pytest.mark.parametrize("path", PAGED)
def test_largest_offset_is_an_empty_page(client, headers, webhook_id, path):
    response = client.get(path.format(webhook=webhook_id) + "?offset=2147483647", headers=headers)
    assert response.status_code == 200
    assert response.json["pagination"]["hasMore"] is False


@pytest.mark.parametrize("field", ["from", "to"])
@pytest.mark.parametrize(
    "value",
    [
        "yesterday",
        "2026-13-01",
        "2026-02-30",
        "2026-01-01T25:00:00",
        "1764000000",
        "",
        "21/11/2026",
    ],
)
def test_non_iso_date_is_a_validation_error_naming_it(client, headers, field, value):
    response = client.get(f"/api/v1/calls?{field}={value}", headers=headers)
    assert set(assert_error(response, 422, "validation_error")["details"]) == {field}


@pytest.mark.parametrize(
    "value", ["2026-11-21", "2026-11-21T09:15:02Z", "2026-11-21t09:15:02.120z"]
)
def test_iso_dates_are_accepted(client, headers, value):
    assert client.get(f"/api/v1/calls?from={value}", headers=headers).status_code == 200


def no_header_injected(response) -> None:
    for name, value in response.headers.items():
        assert "\r" not in value and "\n" not in value, name
        assert name.lower() != "x-injected"


@pytest.mark.parametrize("url", ["https://a.example/x\r\nX-Injected: 1", "https://a.example/\nx"])
def test_crlf_in_a_webhook_url_is_refused(client, headers, url):
    body = {"url": url, "events": ["call.ended"], "secret": "s" * 16}
    response = client.post("/api/v1/webhooks", json=body, headers=headers)
    assert set(assert_error(response, 422, "validation_error")["details"]) == {"url"}
    no_header_injected(response)


def test_crlf_in_a_function_endpoint_is_refused(client, headers, agent_id):
    body = {
        "name": "f",
        "description": "d",
        "endpoint": "https://a.example/\r\nX-Injected: 1",
        "parameters": {"type": "object"},
    }
    response = client.post(f"/api/v1/agents/{agent_id}/functions", json=body, headers=headers)
    assert set(assert_error(response, 422, "validation_error")["details"]) == {"endpoint"}


def test_crlf_in_a_name_is_stored_verbatim_and_never_a_header(client, headers):
    name = "Front desk\r\nX-Injected: 1\r\n\r\n<html>"
    created = client.post(
        "/api/v1/agents", json={"name": name, "systemPrompt": "x"}, headers=headers
    )
    assert created.status_code == 201
    no_header_injected(created)
    fetched = client.get(f"/api/v1/agents/{created.json['id']}", headers=headers)
    assert fetched.json["name"] == name
    no_header_injected(fetched)


@pytest.mark.parametrize(
    "path",
    ["/api/v1/agents/x%0d%0aX-Injected:%201", "/api/v1/calls/x%0aX-Injected:1", "/nothing%0d%0ax"],
)
def test_crlf_in_a_path_is_not_found_and_never_a_header(client, headers, path):
    response = client.get(path, headers=headers)
    assert_error(response, 404, "not_found")
    no_header_injected(response)


SQL = [
    "' OR '1'='1",
    "x'; DROP TABLE agent; --",
    '" OR ""="',
    "1 UNION SELECT * FROM api_key",
    "%",
    "_",
]


@pytest.mark.parametrize("value", SQL)
@pytest.mark.parametrize(
    "template",
    ["/api/v1/agents/{}", "/api/v1/calls/{}", "/api/v1/webhooks/{}", "/api/v1/agents/{}/functions"],
)
def test_sql_metacharacters_in_an_id_are_not_found(client, headers, agent_id, template, value):
    assert_error(client.get(template.format(value), headers=headers), 404, "not_found")


@pytest.mark.parametrize("value", SQL)
def test_sql_metacharacters_in_a_filter_match_nothing(client, headers, runtime_headers, did, value):
    start(client, runtime_headers, did)
    for name in ("agentId", "phoneNumberId"):
        response = client.get("/api/v1/calls", query_string={name: value}, headers=headers)
        assert response.status_code == 200
        assert response.json["calls"] == []


@pytest.mark.parametrize("value", SQL)
def test_sql_metacharacters_in_a_name_are_stored_verbatim(client, headers, agent_id, value):
    body = {"name": value, "systemPrompt": value, "greetingText": value}
    created = client.post("/api/v1/agents", json=body, headers=headers)
    assert created.status_code == 201
    assert {created.json[key] for key in ("name", "systemPrompt", "greetingText")} == {value}
    assert Agent.select().count() == 2  # and the table is still there


# The transcript, variables and cost bodies; the usage report's dates.


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"turns": [{"role": "agent", "text": "a\x00b"}]}, "turns"),
        ({"transcriptSummary": "a\x00b"}, "transcriptSummary"),
        ({"turns": [{"role": "agent\x00", "text": "x"}]}, "turns"),
        ({"turns": [{"role": "agent", "text": "x", "startMs": 10**30}]}, "turns"),
        ({"turns": [{"role": "agent", "text": "x", "startMs": 1e400}]}, None),
        ({"turns": {"0": {"role": "agent", "text": "x"}}}, "turns"),
        ({"turns": [None]}, "turns"),
        ({"turns": [{"role": "agent", "text": "x" * 262_145}]}, "turns"),
    ],
)
def test_hostile_transcript_bodies_are_refused(client, runtime_headers, did, body, field):
    call_id = start(client, runtime_headers, did).json["id"]
    text = json.dumps(body).replace("Infinity", "1e400")
    response = send(client, "POST", f"{RUNTIME}/{call_id}/transcript", runtime_headers, text)
    if field is None:
        assert_error(response, 400, "bad_request")
    else:
        assert set(assert_error(response, 422, "validation_error")["details"]) == {field}


def test_many_small_turns_in_one_body_stop_at_the_limit(client, runtime_headers, did):
    call_id = start(client, runtime_headers, did).json["id"]
    turns = [{"role": "caller", "text": "x"}] * 20_000  # under 1 MiB of JSON
    response = client.post(
        f"{RUNTIME}/{call_id}/transcript", json={"turns": turns}, headers=runtime_headers
    )
    assert set(assert_error(response, 422, "validation_error")["details"]) == {"turns"}


@pytest.mark.parametrize(
    "variables",
    [
        {"name\x00": "x"},
        {"name": "x\x00"},
        {"name": {"deep": {"er": "x"}}},
        {"' OR 1=1 --": "x"},
        {"name\r\nX-Injected": "x"},
        {"ｎａｍｅ": "x"},  # fullwidth letters are not ASCII
    ],
)
def test_hostile_variables_are_refused(client, runtime_headers, did, variables):
    response = start(client, runtime_headers, did, variables=variables)
    assert set(assert_error(response, 422, "validation_error")["details"]) == {"variables"}


def test_variable_values_are_put_in_verbatim(client, runtime_headers, tenant, agent_id, did):
    from app.services import agents as agent_service

    agent_service.update_agent(
        actor=ACTOR, tenant=tenant, agent_id=agent_id, system_prompt="Hi {{name}}."
    )
    value = "x'; DROP TABLE call; -- {{name}} \\1 \\g<0> \r\n<script>"
    session = start(client, runtime_headers, did, variables={"name": value}).json["session"]
    assert session["systemPrompt"] == f"Hi {value}."


@pytest.mark.parametrize(
    "fields",
    [
        {"costBreakdown": {"llm": "9" * 5000}},
        {"costBreakdown": {"llm": 10**30}},
        {"costBreakdown": {"llm\x00": 1}},
        {"costBreakdown": {"llm": 1, "__proto__": 2}},
        {"recordingUrl": "https://a.example/\x00"},
        {"recordingUrl": "https://a.example/\r\nX-Injected: 1"},
        {"recordingUrl": "https://" + "a" * 5000},
    ],
)
def test_hostile_end_reports_are_refused(client, runtime_headers, did, fields):
    call_id = start(client, runtime_headers, did).json["id"]
    body = json.dumps(end_body(**fields)).replace('"' + "9" * 5000 + '"', "9" * 5000)
    response = send(client, "POST", f"{RUNTIME}/{call_id}/ended", runtime_headers, body)
    if "9" * 5000 in body:
        assert_error(response, 400, "bad_request")  # beyond Python's digit limit
    else:
        assert set(assert_error(response, 422, "validation_error")["details"]) == set(fields)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("from=2026-03-01%00", "from"),
        ("from=" + "9" * 5000, "from"),
        ("to=2026-03-01' OR 1=1 --", "to"),
        ("from=-2026-03-01", "from"),
        ("from=+12026-03-01", "from"),
        ("to=0000-01-01", "to"),
        ("from=1e400", "from"),
    ],
)
def test_hostile_usage_dates_are_a_validation_error_naming_them(client, headers, query, field):
    response = client.get("/api/v1/usage?" + query, headers=headers)
    assert set(assert_error(response, 422, "validation_error")["details"]) == {field}
