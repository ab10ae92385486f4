"""Every layer answers errors with the one documented body and X-Request-Id."""

import json
import logging
import threading

import pytest
import requests
from werkzeug.serving import make_server

from app.db import database
from app.models import Agent, Tenant
from app.util import new_id
from tests.helpers import assert_error


def test_missing_key_is_unauthorized(client):
    error = assert_error(client.get("/api/v1/agents"), 401, "unauthorized")
    assert error["details"] == {}
    assert "x-api-key" in error["message"]


def test_unknown_key_is_unauthorized(client):
    assert_error(
        client.get("/api/v1/agents", headers={"x-api-key": "dkl_nope"}), 401, "unauthorized"
    )


def test_key_without_prefix_is_unauthorized(client, api_key):
    response = client.get("/api/v1/agents", headers={"x-api-key": api_key[4:]})
    assert_error(response, 401, "unauthorized")


def test_unknown_route_is_not_found(client, headers):
    assert_error(client.get("/api/v1/nothing-here", headers=headers), 404, "not_found")


def test_unknown_dashboard_page_is_an_html_page(client):
    """A URL under /dashboard/ that matches no page answers as the dashboard's pages do."""
    response = client.get("/dashboard/nothing-here")
    assert response.status_code == 404
    assert response.content_type.startswith("text/html")
    assert "<html" in response.text.lower()


def test_wrong_method_is_method_not_allowed(client, headers):
    response = client.put("/api/v1/agents", json={}, headers=headers)
    assert_error(response, 405, "method_not_allowed")
    assert "GET" in response.headers["Allow"]


def test_malformed_json_is_bad_request(client, headers):
    response = client.post(
        "/api/v1/agents", data="{nope", content_type="application/json", headers=headers
    )
    error = assert_error(response, 400, "bad_request")
    assert error["message"] == "The request body is not valid JSON."


def test_invalid_utf8_is_bad_request(client, headers):
    response = client.post(
        "/api/v1/agents", data=b'{"name": "\xff"}', content_type="application/json", headers=headers
    )
    assert_error(response, 400, "bad_request")


def test_form_body_is_unsupported_media_type(client, headers):
    response = client.post("/api/v1/agents", data={"name": "x"}, headers=headers)
    assert_error(response, 415, "unsupported_media_type")


def test_text_body_is_unsupported_media_type(client, headers):
    response = client.post(
        "/api/v1/agents", data='{"name": "x"}', content_type="text/plain", headers=headers
    )
    assert_error(response, 415, "unsupported_media_type")


def test_body_over_one_mib_is_payload_too_large(client, headers):
    body = '{"name": "' + "x" * (1024 * 1024) + '"}'
    response = client.post(
        "/api/v1/agents", data=body, content_type="application/json", headers=headers
    )
    assert_error(response, 413, "payload_too_large")


def test_json_array_body_is_validation_error(client, headers):
    response = client.post("/api/v1/agents", json=[1, 2], headers=headers)
    error = assert_error(response, 422, "validation_error")
    assert "_schema" in error["details"]


def test_unexpected_error_is_internal_error_without_internals(app, client, headers, caplog):
    @app.get("/api/v1/explode")
    def explode():
        raise RuntimeError("secret internals")

    with caplog.at_level(logging.ERROR):
        response = client.get("/api/v1/explode", headers=headers)
    error = assert_error(response, 500, "internal_error")
    assert "secret internals" not in response.get_data(as_text=True)
    assert error["details"] == {}
    assert "secret internals" in caplog.text


def test_write_refused_by_a_unique_index_is_conflict(app, client, headers, tenant):
    """Whatever view meets it (two identical creates in a race): 409 conflict, never a 500."""

    @app.post("/api/v1/duplicate")
    def duplicate():
        with database.atomic():
            Tenant.create(id=new_id("ten"), name=tenant.name)
        return {}

    response = client.post("/api/v1/duplicate", headers=headers)
    assert_error(response, 409, "conflict")
    assert response.get_json() == {
        "error": {
            "code": "conflict",
            "message": "A record with the same unique value exists already.",
            "details": {},
            "requestId": response.headers["X-Request-Id"],
        }
    }
    assert Tenant.select().count() == 1


def test_write_refused_by_a_foreign_key_is_conflict(app, client, headers):
    @app.post("/api/v1/orphan")
    def orphan():
        with database.atomic():
            Agent.create(id=new_id("agt"), tenant="ten_gone", name="x", system_prompt="x")
        return {}

    error = assert_error(client.post("/api/v1/orphan", headers=headers), 409, "conflict")
    assert error["message"] == "The request refers to a record that no longer exists."


def test_other_constraint_is_internal_error(app, client, headers, caplog):
    """A NOT NULL refused is a bug of the service, not a conflict: logged, 500."""

    @app.post("/api/v1/incomplete")
    def incomplete():
        with database.atomic():
            Tenant.insert(id=new_id("ten"), name=None).execute()
        return {}

    with caplog.at_level(logging.ERROR):
        response = client.post("/api/v1/incomplete", headers=headers)
    assert_error(response, 500, "internal_error")
    assert "unhandled error" in caplog.text


def test_every_response_has_request_id(client, headers):
    ok = client.get("/api/v1/agents", headers=headers)
    bad = client.get("/api/v1/agents")
    assert ok.headers["X-Request-Id"].startswith("req_")
    assert bad.headers["X-Request-Id"].startswith("req_")
    assert ok.headers["X-Request-Id"] != bad.headers["X-Request-Id"]


def test_request_target_over_8000_bytes_is_uri_too_long(client, headers):
    path = "/api/v1/agents/agent_"
    fits = client.get(path + "x" * (8000 - len(path)), headers=headers)
    assert_error(fits, 404, "not_found")
    response = client.get(path + "x" * (8001 - len(path)), headers=headers)
    error = assert_error(response, 414, "uri_too_long")
    assert error == {
        "code": "uri_too_long",
        "message": "The request target (path and query) is longer than 8,000 bytes.",
        "details": {},
        "requestId": response.headers["X-Request-Id"],
    }


def test_request_target_is_measured_as_sent(client, headers):
    """Percent-escapes count as sent (three bytes each), as the server's own limit counts."""
    path = "/api/v1/agents/" + "%41" * 2700
    assert_error(client.get(path, headers=headers), 414, "uri_too_long")


def test_header_over_8_kib_is_too_large_before_authentication(client):
    fits = client.get("/api/v1/agents", headers={"x-api-key": "k" * (8192 - len("x-api-key"))})
    assert_error(fits, 401, "unauthorized")
    response = client.get("/api/v1/agents", headers={"X-Padding": "p" * 8184})
    error = assert_error(response, 431, "header_too_large")
    assert error["message"] == "The header X-Padding is larger than 8,192 bytes (name and value)."
    assert error["details"] == {}


def test_huge_header_name_is_cut_short_in_the_message(client):
    response = client.get("/healthz", headers={"X-" + "n" * 9000: "v"})
    error = assert_error(response, 431, "header_too_large")
    assert len(error["message"]) < 200


def assert_server_answer(response, status: int) -> None:
    """The HTTP server's own answer, from below the app: HTML, no request id."""
    assert response.status_code == status, response.text[:300]
    assert response.headers["Content-Type"].startswith("text/html")
    assert "X-Request-Id" not in response.headers


@pytest.fixture
def dev_server(app):
    """werkzeug's development server (what flask run serves with) on a free port."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield f"http://127.0.0.1:{server.port}"
    server.shutdown()
    thread.join()


def test_dev_server_answers_json_up_to_its_own_limits(dev_server):
    assert_error(requests.get(dev_server + "/" + "x" * 6000, timeout=10), 404, "not_found")
    long_target = requests.get(dev_server + "/" + "x" * 8100, timeout=10)
    assert_error(long_target, 414, "uri_too_long")
    big_header = requests.get(
        dev_server + "/healthz", headers={"X-Padding": "p" * 10240}, timeout=10
    )
    assert_error(big_header, 431, "header_too_large")
    assert_server_answer(requests.get(dev_server + "/" + "x" * 65537, timeout=10), 414)
    many = {f"X-Header-{number}": "v" for number in range(101)}
    assert_server_answer(requests.get(dev_server + "/healthz", headers=many, timeout=10), 431)


def chunks(total: int, size: int = 64 * 1024):
    """A JSON body of total bytes sent chunked (no Content-Length): one long string."""
    yield b'{"name": "'
    sent = 11
    while sent < total:
        piece = min(size, total - sent)
        yield b"x" * piece
        sent += piece
    yield b'"}'


def test_a_chunked_body_over_the_limit_is_413_on_the_dev_server(dev_server, api_key):
    headers = {"x-api-key": api_key, "Content-Type": "application/json"}
    response = requests.post(
        dev_server + "/api/v1/agents", data=chunks(3 * 1024 * 1024), headers=headers, timeout=30
    )
    assert_error(response, 413, "payload_too_large")


def test_a_chunked_body_within_the_limit_is_read_whole(dev_server, api_key):
    headers = {"x-api-key": api_key, "Content-Type": "application/json"}
    prompt = "p" * (900 * 1024)
    body = json.dumps({"name": "Chunked", "systemPrompt": prompt[:20000], "voiceId": "Puck"})
    pieces = (body[start : start + 1000].encode() for start in range(0, len(body), 1000))
    response = requests.post(
        dev_server + "/api/v1/agents", data=pieces, headers=headers, timeout=30
    )
    assert response.status_code == 201, response.text
    assert len(response.json()["systemPrompt"]) == 20000
