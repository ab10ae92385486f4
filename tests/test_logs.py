"""Logs: one structured line per request, never a key or a secret."""

import json
import logging

from app.logs import JsonFormatter, TextFormatter


def request_records(caplog):
    return [r for r in caplog.records if r.name == "app.requests"]


def test_one_line_per_request_with_ids_route_status_and_duration(client, headers, tenant, caplog):
    with caplog.at_level(logging.INFO, logger="app.requests"):
        response = client.get("/api/v1/agents/agent_nope", headers=headers)
    [record] = request_records(caplog)
    assert record.requestId == response.headers["X-Request-Id"]
    assert record.tenantId == tenant.id
    assert record.route == "/api/v1/agents/<agent_id>"
    assert (record.method, record.status) == ("GET", 404)
    assert record.durationMs >= 0


def test_json_lines_carry_no_key_or_secret(client, headers, api_key, caplog):
    secret = "whsec-" + "s" * 30
    with caplog.at_level(logging.INFO):
        client.get("/api/v1/agents", headers=headers)
        client.post("/api/v1/agents", json={"name": "x", "systemPrompt": secret}, headers=headers)
        client.get("/api/v1/agents", headers={"x-api-key": api_key + "x"})
    lines = [JsonFormatter().format(record) for record in caplog.records]
    assert len(request_records(caplog)) == 3
    for line in lines:
        payload = json.loads(line)
        assert {"time", "level", "logger", "message"} <= set(payload)
        assert api_key not in line and secret not in line


def test_text_format_appends_fields():
    record = logging.makeLogRecord({"msg": "GET / 200", "levelname": "INFO", "status": 200})
    assert TextFormatter().format(record).endswith("GET / 200 status=200")


def test_json_format_takes_any_value():
    """orjson writes the line; what it refuses (an integer beyond 64 bits) goes through json,
    and what neither knows is written as its str()."""
    record = logging.makeLogRecord({"msg": "x", "levelname": "INFO", "big": 2**70, "at": {1}})
    payload = json.loads(JsonFormatter().format(record))
    assert (payload["big"], payload["at"], payload["message"]) == (2**70, "{1}", "x")
    record = logging.makeLogRecord({"msg": "ü", "levelname": "INFO", "at": {1}})
    assert JsonFormatter().format(record).count("ü") == 1  # UTF-8, not \u escapes
