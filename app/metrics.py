"""Prometheus metrics at GET /metrics (bearer METRICS_TOKEN; disabled when unset).

Under gunicorn set PROMETHEUS_MULTIPROC_DIR (deploy/gunicorn.conf.py does) so every worker's
samples are summed at scrape time; the worker process records into the same directory.
"""

import hmac
import os
import time

from flask import Flask, Response, current_app, g, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from app import queue
from app.errors import NotFound, Unauthorized

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

HTTP_REQUESTS = Counter(
    "voiceagent_http_requests_total",
    "HTTP requests by route and status.",
    ["method", "route", "status"],
)
HTTP_LATENCY = Histogram(
    "voiceagent_http_request_duration_seconds",
    "HTTP request latency by route.",
    ["method", "route"],
    buckets=LATENCY_BUCKETS,
)
WEBHOOK_ATTEMPTS = Counter(
    "voiceagent_webhook_attempts_total",
    "Webhook delivery attempts by outcome (success, retry, failed, disabled) and attempt number.",
    ["outcome", "attempt"],
)
WEBHOOK_LAG = Histogram(
    "voiceagent_webhook_delivery_lag_seconds",
    "Time from an event to its successful delivery.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 5, 30, 60, 300, 1800, 7200, 36000, 100000),
)
FUNCTION_CALLS = Counter(
    "voiceagent_function_calls_total", "Function invocations by result code.", ["result"]
)
FUNCTION_LATENCY = Histogram(
    "voiceagent_function_call_duration_seconds",
    "Function invocation latency as seen by the voice runtime.",
    buckets=LATENCY_BUCKETS,
)
CALLS = Counter("voiceagent_calls_total", "Calls by status reached.", ["status"])


class QueueDepthCollector(Collector):
    """Queue lengths, read from Redis at scrape time."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url

    def collect(self):
        from redis import Redis, RedisError

        family = GaugeMetricFamily(
            "voiceagent_queue_depth", "Jobs waiting in each queue.", labels=["queue"]
        )
        try:
            with Redis.from_url(
                self.redis_url, socket_connect_timeout=1, socket_timeout=1
            ) as client:
                for name in ("functions", "function_tests", *queue.WEBHOOK_QUEUES, "whatsapp"):
                    family.add_metric([name], queue.depth(client, name))
        except RedisError:
            pass
        yield family


def exposition() -> bytes:
    """The metrics in Prometheus's text format: this process's (the default registry) or, in
    multiprocess mode, every process's summed; then the queue depths, read now."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        summed = CollectorRegistry()
        multiprocess.MultiProcessCollector(summed)
        text = generate_latest(summed)
    else:
        text = generate_latest(REGISTRY)
    redis_url = current_app.config.get("REDIS_URL")
    if redis_url:
        queues = CollectorRegistry()
        queues.register(QueueDepthCollector(redis_url))
        text += generate_latest(queues)
    return text


def metrics_view() -> Response:
    token = current_app.config.get("METRICS_TOKEN")
    if not token:
        raise NotFound("Metrics are disabled: set METRICS_TOKEN to enable GET /metrics.")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), token.encode()):
        raise Unauthorized("A valid metrics token is required: Authorization: Bearer <token>.")
    return Response(exposition(), mimetype=CONTENT_TYPE_LATEST)


def _record(response: Response) -> Response:
    """after_request: count the request and observe its latency, by route (never by path)."""
    rule = request.url_rule
    if rule is None or rule.rule == "/metrics":
        return response
    HTTP_REQUESTS.labels(request.method, rule.rule, str(response.status_code)).inc()
    started = g.get("request_started")
    if started is not None:
        HTTP_LATENCY.labels(request.method, rule.rule).observe(time.perf_counter() - started)
    return response


def init_app(app: Flask) -> None:
    app.add_url_rule("/metrics", "metrics", metrics_view)
    app.after_request(_record)
