"""Logging: JSON lines (production) or plain text (development), and one line per request.

Request lines carry the request id, tenant id, method, route, status and duration; never a
header, a query string or a body, so API keys and secrets cannot reach the log.
"""

import json
import logging
import os
import sys
import threading
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


class StreamHandler(logging.StreamHandler):
    """A stream handler that writes request lines in batches (as nginx's buffered access_log).

    Writing each request's line at once cost a system call per request, during which the
    thread let go of the GIL and the other threads queued on the handler's lock: with
    stderr a pipe (as under systemd), GET /api/v1/agents served 12 % fewer requests a
    second under load than with the lines batched. Request lines (logger
    app.requests) now gather until 64 KiB are waiting, flush_seconds have passed since the
    first of them, or any other line is logged, which is written at once after them, so the
    order holds. A process that is killed outright loses at most flush_seconds of request
    lines; one that exits flushes them (logging.shutdown), and one that forks flushes first.
    flush_seconds 0 writes every line at once.
    """

    BATCH_BYTES = 64 * 1024

    def __init__(self, stream: Any = None, flush_seconds: float = 1.0) -> None:
        super().__init__(stream)
        self.flush_seconds = flush_seconds
        self._waiting: list[str] = []
        self._waiting_bytes = 0
        self._flusher_pid = 0  # the process whose thread flushes by time (none after a fork)
        self._due = threading.Event()
        os.register_at_fork(before=self.flush, after_in_child=self._forked)

    def emit(self, record: logging.LogRecord) -> None:
        if self.flush_seconds <= 0 or record.name != request_log.name:
            self.flush()
            super().emit(record)
            return
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        self._waiting.append(line)  # under the handler's lock (Handler.handle)
        self._waiting_bytes += len(line)
        if self._waiting_bytes >= self.BATCH_BYTES:
            self._write_waiting()
        elif len(self._waiting) == 1:
            if self._flusher_pid != os.getpid():
                self._flusher_pid = os.getpid()
                flusher = threading.Thread(target=self._flush_when_due, name="log-flush")
                flusher.daemon = True
                flusher.start()
            self._due.set()

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._write_waiting()
            super().flush()

    def _write_waiting(self) -> None:
        if self._waiting:
            try:
                self.stream.write("".join(self._waiting))
                self.stream.flush()
            except Exception:
                pass  # a log that cannot be written never fails a request: the lines are dropped
            self._waiting.clear()
            self._waiting_bytes = 0

    def _forked(self) -> None:
        self._due = threading.Event()  # the parent's thread, waiting on the old one, is gone

    def _flush_when_due(self) -> None:
        while True:
            self._due.wait()
            self._due.clear()
            time.sleep(self.flush_seconds)
            self.flush()


def configure(log_format: str, level: str, flush_seconds: float = 1.0) -> None:
    """Install one handler on the root logger (once per process)."""
    root = logging.getLogger()
    handler = next((h for h in root.handlers if isinstance(h, StreamHandler)), None)
    if handler is None:
        handler = StreamHandler(sys.stderr)
        root.addHandler(handler)
    handler.flush_seconds = flush_seconds
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root.setLevel(level.upper())
    logging.getLogger("peewee_migrate").setLevel(logging.WARNING)


# Per thread, a request line's record as LogRecord.__init__ made it once: what it works out
# for every record (source file, module, thread and process names) is the same for every
# request line of a thread, so each line copies it and sets its time, message and fields.
_prototypes = threading.local()


def _request_record(args: tuple[Any, ...], fields: dict[str, Any]) -> logging.LogRecord:
    prototype = getattr(_prototypes, "record", None)
    if prototype is None or prototype.process != os.getpid():  # new thread, or forked
        prototype = _prototypes.record = request_log.makeRecord(
            request_log.name, logging.INFO, __file__, 0, "%s %s %s", (), None, "_log_request"
        )
    record = object.__new__(type(prototype))
    attributes = record.__dict__
    attributes.update(prototype.__dict__)
    now = time.time()
    attributes["created"] = now
    attributes["msecs"] = (now - int(now)) * 1000
    attributes["relativeCreated"] = (now - logging._startTime) * 1000  # type: ignore[attr-defined]
    attributes["args"] = args
    attributes.update(fields)
    return record


def _log_request(response: Response) -> Response:
    if not request_log.isEnabledFor(logging.INFO):
        return response
    now = time.perf_counter()
    # The request and g read once each: every read through Flask's proxies costs a lookup.
    current, context = request._get_current_object(), g._get_current_object()  # type: ignore[attr-defined]
    started = getattr(context, "request_started", None)
    tenant = getattr(context, "tenant", None)
    rule = current.url_rule
    route = rule.rule if rule is not None else None
    method, status = current.method, response.status_code
    # Not request_log.info(), which would also walk the stack for the caller's file and
    # line (always this function) and work out the thread's and process's names again.
    record = _request_record(
        (method, route or current.path, status),
        {
            "requestId": getattr(context, "request_id", None),
            "tenantId": tenant.id if tenant is not None else None,
            "method": method,
            "route": route,
            "status": status,
            "durationMs": round((now - started) * 1000, 2) if started else None,
        },
    )
    request_log.handle(record)
    return response


def init_app(app: Flask) -> None:
    if not app.testing:
        configure(
            app.config["LOG_FORMAT"], app.config["LOG_LEVEL"], app.config["LOG_FLUSH_SECONDS"]
        )
    # peewee logs every query with its parameters at DEBUG: webhook and signing secrets
    # among them. Keep them out even when LOG_LEVEL is DEBUG.
    logging.getLogger("peewee").setLevel(logging.INFO)
    app.after_request(_log_request)
