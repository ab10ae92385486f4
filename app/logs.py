"""Logging: JSON lines (production) or plain text (development), and one line per request.

Request lines carry the request id, tenant id, method, route, status and duration; never a
header, a query string or a body, so API keys and secrets cannot reach the log.
"""

import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any

import orjson
from flask import Flask, Response, g, request

request_log = logging.getLogger("app.requests")

# Attributes every LogRecord has; anything else was passed with extra= and is logged.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
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
        return f"{line} {extra}" if extra else line


def configure(log_format: str, level: str) -> None:
    """Install one handler on the root logger (once per process)."""
    root = logging.getLogger()
    handler = next((h for h in root.handlers if getattr(h, "_voiceagent", False)), None)
    if handler is None:
        handler = logging.StreamHandler(sys.stderr)
        handler._voiceagent = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root.setLevel(level.upper())
    logging.getLogger("peewee_migrate").setLevel(logging.WARNING)


def _start_timer() -> None:
    g.request_started = time.perf_counter()


def _log_request(response: Response) -> Response:
    if not request_log.isEnabledFor(logging.INFO):
        return response
    started = g.get("request_started")
    duration_ms = round((time.perf_counter() - started) * 1000, 2) if started else None
    tenant = g.get("tenant")
    route = request.url_rule.rule if request.url_rule else None
    # The record is made here rather than by request_log.info(), which would also walk the
    # stack for the caller's file and line: always this function, and a twentieth of the
    # CPU of a small request.
    record = request_log.makeRecord(
        request_log.name,
        logging.INFO,
        __file__,
        0,
        "%s %s %s",
        (request.method, route or request.path, response.status_code),
        None,
        func="_log_request",
        extra={
            "requestId": g.get("request_id"),
            "tenantId": tenant.id if tenant is not None else None,
            "method": request.method,
            "route": route,
            "status": response.status_code,
            "durationMs": duration_ms,
        },
    )
    request_log.handle(record)
    return response


def init_app(app: Flask) -> None:
    if not app.testing:
        configure(app.config["LOG_FORMAT"], app.config["LOG_LEVEL"])
    # peewee logs every query with its parameters at DEBUG: webhook and signing secrets
    # among them. Keep them out even when LOG_LEVEL is DEBUG.
    logging.getLogger("peewee").setLevel(logging.INFO)
    app.before_request(_start_timer)
    app.after_request(_log_request)
