"""Logs: one structured line per request, never a key or a secret."""

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

from app.logs import JsonFormatter, TextFormatter

ROOT = Path(__file__).resolve().parents[2]


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


def test_formatters_drop_terminal_escapes():
    record = logging.makeLogRecord(
        {"name": "werkzeug", "levelno": logging.INFO, "levelname": "INFO"}
        | {"msg": "\x1b[33mPress CTRL+C to quit\x1b[0m", "tone": "\x1b[1mbold\x1b[0m"}
    )
    assert TextFormatter().format(record).endswith(" werkzeug Press CTRL+C to quit tone=bold")
    assert json.loads(JsonFormatter().format(record))["message"] == "Press CTRL+C to quit"


def test_request_line_reads_method_route_and_status(client, headers, caplog):
    with caplog.at_level(logging.INFO, logger="app.requests"):
        client.get("/api/v1/agents?limit=5", headers=headers)
        client.get("/nowhere", headers=headers)
    first, second = request_records(caplog)
    assert first.getMessage() == "GET /api/v1/agents 200"
    assert (second.getMessage(), second.route, second.status) == ("GET /nowhere 404", None, 404)
    assert first.requestId != second.requestId
    line = TextFormatter().format(first)
    assert line.endswith("status=200 durationMs=" + str(first.durationMs))
    assert "limit=5" not in line


def run_python(code: str, *args: str, env: dict[str, str] | None = None) -> list[str]:
    """Run code in a new Python process at the project's root; the lines of its stderr."""
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stderr.splitlines()


FORKING = """
import logging, os, sys
from app import logs

logs.configure(sys.argv[1], "INFO")
log = logging.getLogger("app.jobs")
log.info("before the fork", extra={"pid": os.getpid()})
child = os.fork()
if child == 0:
    log.info("in the child", extra={"pid": os.getpid()})
    os._exit(0)  # as RQ's work horse and worker pool end: no exit hook runs
os.waitpid(child, 0)
for i in range(500):
    logs.request_log.info("GET /api/v1/agents %s", i, extra={"pid": os.getpid()})
"""


def test_lines_of_a_forked_child_and_those_queued_at_exit_are_written():
    """Each process's lines in its own order; the two processes' lines may interleave."""
    lines = [json.loads(line) for line in run_python(FORKING, "json")]
    child = [line["message"] for line in lines if line["pid"] != lines[-1]["pid"]]
    parent = [line["message"] for line in lines if line["pid"] == lines[-1]["pid"]]
    assert child == ["in the child"]
    assert parent == ["before the fork"] + [f"GET /api/v1/agents {i}" for i in range(500)]


SERVING = """
import sys
from app import create_app

client = create_app().test_client()
client.get("/api/v1/agents?key=" + sys.argv[1], headers={"x-api-key": sys.argv[1]})
"""


def test_a_configured_process_writes_one_json_line_per_request(app_config, api_key, tenant):
    env = {"DATABASE_URL": app_config["DATABASE_URL"], "LOG_FORMAT": "json", "REDIS_URL": ""}
    lines = run_python(SERVING, api_key, env=env)
    requests = [json.loads(line) for line in lines if '"app.requests"' in line]
    assert len(requests) == 1
    [line] = requests
    assert line["message"] == "GET /api/v1/agents 200"
    assert (line["tenantId"], line["route"], line["status"]) == (
        tenant.id,
        "/api/v1/agents",
        200,
    )
    assert line["requestId"].startswith("req") and line["durationMs"] >= 0
    assert not any(api_key in line for line in lines)


def wait_for(log: Path, text: str, process: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


def test_flask_run_logs_one_plain_line_per_request(app_config, tmp_path):
    """The app's own line is the request's only line; werkzeug's coloured one is not written,
    its address line is, and nothing carries terminal escape codes."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "DATABASE_URL": app_config["DATABASE_URL"],
        "LOG_FORMAT": "text",
        "REDIS_URL": "",
        "FLASK_APP": "wsgi",
    }
    log = tmp_path / "flask-run.log"
    flask = str(Path(sys.executable).parent / "flask")
    with open(log, "w") as out:
        server = subprocess.Popen(
            [flask, "run", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(log, f"Running on http://127.0.0.1:{port}", server)
        # A 401, which werkzeug's own line shows in bold red.
        assert requests.get(f"http://127.0.0.1:{port}/api/v1/agents", timeout=10).status_code == 401
        # Lines are written in order: once this one is out, the first request's are too.
        requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
        wait_for(log, "GET /healthz 200", server)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
    output = log.read_text()
    assert "\x1b[" not in output
    [line] = [line for line in output.splitlines() if "/api/v1/agents" in line]
    assert " INFO app.requests GET /api/v1/agents 401 requestId=req_" in line
    assert f" * Running on http://127.0.0.1:{port}" in output
