"""Logging: JSON lines (production) or plain text (development), and one line per request."""

import atexit
import json
import logging
import os
import queue
import re
import sys
import time
from datetime import UTC, datetime
from logging.handlers import QueueHandler, QueueListener
from typing import Any

import orjson
from flask import Flask, Response, g, request

request_log = logging.getLogger("app.requests")

# Attributes every LogRecord has; anything else was passed with extra= and is logged.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}

# Terminal escape sequences (werkzeug colours its development server's lines): a log line is
# read in files and log viewers, where they are noise.
_ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _plain(text: str) -> str:
    return _ESCAPES.sub("", text)


def _not_a_request_line(record: logging.LogRecord) -> bool:
    """Filter of the werkzeug logger: drop the development server's line per request (its
    access-log line, at INFO); the app writes its own (app.requests). Its other lines, such
    as the address it serves and its errors, stay."""
    return not (record.levelno == logging.INFO and str(record.msg).endswith('] "%s" %s %s'))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": _plain(record.getMessage()),
        }
        payload.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        try:
            return orjson.dumps(payload, default=str).decode()
        except TypeError:  # what orjson refuses (an integer beyond 64 bits)
            return json.dumps(payload, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        extra = " ".join(f"{k}={v}" for k, v in record.__dict__.items() if k not in _STANDARD)
        line = super().format(record)
        return _plain(f"{line} {extra}" if extra else line)


# What configure() installed on the root logger in this process: a QueueHandler whose
# QueueListener writes to stderr, or (in a process forked after that) a StreamHandler.
_handler: logging.Handler | None = None
_listener: QueueListener | None = None
_writer: logging.StreamHandler | None = None


def configure(log_format: str, level: str) -> None:
    """Send the root logger's lines to stderr: each is formatted where it is logged and written
    by a QueueListener's thread, so a request never waits for the write."""
    global _handler, _listener, _writer
    formatter = JsonFormatter() if log_format == "json" else TextFormatter()
    root = logging.getLogger()
    if _listener is None:
        if _handler is not None:
            root.removeHandler(_handler)
        records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        # The QueueHandler formats (see QueueHandler.prepare), the writer writes the line.
        _writer = logging.StreamHandler(sys.stderr)
        _listener = QueueListener(records, _writer)
        _listener.start()
        _handler = QueueHandler(records)
        root.addHandler(_handler)
    assert _handler is not None
    _handler.setFormatter(formatter)
    root.setLevel(level.upper())
    logging.getLogger("peewee_migrate").setLevel(logging.WARNING)
    logging.getLogger("werkzeug").addFilter(_not_a_request_line)  # once: the same function


def _write_directly() -> None:
    """Replace the QueueHandler with a StreamHandler that writes each line at once."""
    global _handler, _listener, _writer
    if _handler is None or _listener is None:
        return
    root = logging.getLogger()
    root.removeHandler(_handler)
    direct = logging.StreamHandler(sys.stderr)
    direct.setFormatter(_handler.formatter)
    root.addHandler(direct)
    _handler, _listener, _writer = direct, None, None


def _at_exit() -> None:
    """Lines logged from now on are written at once; the listener writes those still queued."""
    listener = _listener
    _write_directly()
    if listener is not None:
        listener.stop()


def _before_fork() -> None:
    # The fork must not copy stderr in the middle of the listener's write.
    if _writer is not None:
        _writer.acquire()


def _after_fork_in_parent() -> None:
    if _writer is not None:
        _writer.release()


# A forked child has no listener thread, and may end with os._exit (RQ's work horse and worker
# pool do), which runs no exit hook: it writes its lines itself, at once. The parent's lines
# still queued are the parent's to write.
atexit.register(_at_exit)
os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_write_directly
)


def _log_request(response: Response) -> Response:
    """after_request: one line with the request's ids, route, status and duration; never a
    header, a query string or a body, so keys and secrets cannot reach the log."""
    started = g.get("request_started")
    duration_ms = round((time.perf_counter() - started) * 1000, 2) if started else None
    tenant = g.get("tenant")
    rule = request.url_rule
    route = rule.rule if rule is not None else None
    request_log.info(
        "%s %s %s",
        request.method,
        route or request.path,
        response.status_code,
        extra={
            "requestId": g.get("request_id"),
            "tenantId": tenant.id if tenant is not None else None,
            "method": request.method,
            "route": route,
            "status": response.status_code,
            "durationMs": duration_ms,
        },
    )
    return response


def init_app(app: Flask) -> None:
    if not app.testing:
        configure(app.config["LOG_FORMAT"], app.config["LOG_LEVEL"])
    # peewee logs every query with its parameters at DEBUG: webhook and signing secrets
    # among them. Keep them out even when LOG_LEVEL is DEBUG.
    logging.getLogger("peewee").setLevel(logging.INFO)
    app.after_request(_log_request)
