"""Logs: one structured line per request, never a key or a secret."""

import io
import json
import logging
import os
import threading
import time
import weakref

from app import logs
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


def test_request_record_carries_what_logging_gives_any_record(client, headers, caplog):
    """Request lines copy a record made once per thread: each has the standard attributes a
    record made by logging has, with its own time, message and fields."""
    before = time.time()
    with caplog.at_level(logging.INFO, logger="app.requests"):
        client.get("/api/v1/agents", headers=headers)
        client.get("/api/v1/agents/agent_nope", headers=headers)
    first, second = request_records(caplog)
    made = logs.request_log.makeRecord(
        "app.requests", logging.INFO, logs.__file__, 0, "%s", (), None, "_log_request"
    )
    for name in ("name", "levelname", "pathname", "module", "funcName", "thread", "process"):
        assert getattr(first, name) == getattr(second, name) == getattr(made, name)
    assert (first.threadName, first.processName) == (made.threadName, made.processName)
    assert before <= first.created <= second.created <= time.time()
    assert first.msecs == (first.created - int(first.created)) * 1000
    assert first.getMessage() == "GET /api/v1/agents 200"
    assert (second.getMessage(), second.status) == ("GET /api/v1/agents/<agent_id> 404", 404)
    assert first.requestId != second.requestId
    assert (
        TextFormatter().format(second).endswith("status=404 durationMs=" + str(second.durationMs))
    )


def test_request_record_names_its_own_thread_and_process():
    in_thread: list[logging.LogRecord] = []
    thread = threading.Thread(target=lambda: in_thread.append(logs._request_record((), {})))
    thread.start()
    thread.join()
    assert in_thread[0].thread == thread.ident and in_thread[0].threadName == thread.name
    here = logs._request_record((), {})
    assert (here.thread, here.process) == (threading.get_ident(), os.getpid())
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # a forked process (a gunicorn worker) must not reuse its parent's record
        os.write(write, str(logs._request_record((), {}).process).encode())
        os._exit(0)
    os.waitpid(child, 0)
    assert int(os.read(read, 32)) == child


def buffered(flush_seconds: float, stream=None) -> tuple[logs.StreamHandler, io.StringIO]:
    stream = stream if stream is not None else io.StringIO()
    handler = logs.StreamHandler(stream, flush_seconds)
    handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
    return handler, stream


def request_line(status: int = 200) -> logging.LogRecord:
    return logs._request_record(("GET", "/api/v1/agents", status), {"status": status})


def test_request_lines_are_written_together_within_flush_seconds():
    handler, stream = buffered(0.3)
    started = time.monotonic()
    handler.handle(request_line(200))
    handler.handle(request_line(404))
    assert stream.getvalue() == ""
    while not stream.getvalue() and time.monotonic() - started < 5:
        time.sleep(0.01)
    assert time.monotonic() - started >= 0.25
    assert stream.getvalue().splitlines() == [
        "app.requests GET /api/v1/agents 200",
        "app.requests GET /api/v1/agents 404",
    ]


def test_any_other_line_is_written_at_once_after_the_waiting_request_lines():
    handler, stream = buffered(60)
    handler.handle(request_line())
    handler.handle(logging.makeLogRecord({"name": "app.jobs", "msg": "delivered"}))
    assert stream.getvalue().splitlines() == [
        "app.requests GET /api/v1/agents 200",
        "app.jobs delivered",
    ]


def test_a_full_batch_is_written_at_once():
    handler, stream = buffered(60)
    handler.BATCH_BYTES = 150  # a line is 36 bytes
    for _ in range(4):
        handler.handle(request_line())
    assert stream.getvalue() == ""
    handler.handle(request_line())
    assert len(stream.getvalue().splitlines()) == 5


def test_flush_seconds_zero_writes_every_line_at_once():
    handler, stream = buffered(0)
    handler.handle(request_line())
    assert stream.getvalue() == "app.requests GET /api/v1/agents 200\n"


def test_waiting_lines_are_written_before_a_fork_and_at_exit(tmp_path):
    path = tmp_path / "log"
    with open(path, "w") as stream:
        handler, _ = buffered(60, stream)
        handler.handle(request_line(200))
        child = os.fork()
        if child == 0:  # the child must not write its parent's waiting line again
            handler.handle(request_line(201))
            handler.flush()
            os._exit(0)
        os.waitpid(child, 0)
        handler.handle(request_line(202))
        logging.shutdown([weakref.ref(handler)])  # what runs at exit
    assert sorted(path.read_text().splitlines()) == [
        f"app.requests GET /api/v1/agents {status}" for status in (200, 201, 202)
    ]
