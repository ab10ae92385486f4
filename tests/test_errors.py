"""Every layer answers errors with the one documented body and X-Request-Id."""

import logging

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


def test_every_response_has_request_id(client, headers):
    ok = client.get("/api/v1/agents", headers=headers)
    bad = client.get("/api/v1/agents")
    assert ok.headers["X-Request-Id"].startswith("req_")
    assert bad.headers["X-Request-Id"].startswith("req_")
    assert ok.headers["X-Request-Id"] != bad.headers["X-Request-Id"]
