"""gunicorn settings for the web process: gunicorn -c deploy/gunicorn.conf.py wsgi:app

Every number can be overridden from the environment (the systemd unit's EnvironmentFile).
"""

import multiprocessing
import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

bind = os.environ.get("BIND", "127.0.0.1:8000")

# Threads, not processes, for concurrency: a function call holds its request for up to 5.5 s
# while the tenant's endpoint answers, and those waits are I/O, so a worker's other threads
# keep serving. Python work itself is bound by the GIL, and a thread inside a write
# transaction (SQLite's writers' lock, a tenant's row on PostgreSQL) waits for its process's
# GIL between statements while every other writer waits for it: the fewer threads share a
# process, the sooner it gets the GIL back. Hence two processes per core with 4 threads each
# (16 threads on 2 cores, as many waiting function calls as 2 x 8 held, with a shorter tail:
# docs/capacity.md).
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY", 2 * multiprocessing.cpu_count()))
threads = int(os.environ.get("WEB_THREADS", 4))  # up to 4 waiting function calls per worker

# Well above the 5.5 s worst case of a request, so only a truly stuck worker is recycled.
timeout = int(os.environ.get("WEB_TIMEOUT", 30))
graceful_timeout = 20
keepalive = 5  # seconds; behind a reverse proxy that reuses connections
backlog = 2048

# Recycle workers now and then so a slow leak can never grow without bound.
max_requests = 20_000
max_requests_jitter = 2_000

# The request head. The app answers a request target over 8,000 bytes (414) and a header
# over 8 KiB (431) itself, in its JSON error body with X-Request-Id (app/resources/guards.py).
# gunicorn's limits sit above those, so only a head beyond them gets gunicorn's own plain
# HTML answer: a request line over 8,190 bytes (the most gunicorn allows short of no limit
# at all) is its 414; a header field over 16 KiB, or more than 100 header fields, its 431.
# Raising the field size costs memory: gunicorn buffers up to fields x size (1.6 MB) while
# it reads a head.
limit_request_line = 8190
limit_request_field_size = 16384
limit_request_fields = 100

# The app logs one JSON line per request itself; gunicorn only logs its own events.
accesslog = None
errorlog = "-"

# Prometheus multiprocess mode: every worker writes its samples to this directory and
# /metrics sums them. It must be set before the workers import prometheus_client.
metrics_dir = os.environ.setdefault(
    "PROMETHEUS_MULTIPROC_DIR", str(ROOT / "instance" / "prometheus")
)


def on_starting(server):
    shutil.rmtree(metrics_dir, ignore_errors=True)
    os.makedirs(metrics_dir, exist_ok=True)


def child_exit(server, worker):
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
