"""The shipped deployment: nginx from deploy/nginx.conf in front of gunicorn with
deploy/gunicorn.conf.py. Slow clients (a request's head a byte every 2 s) hold nginx
connections, never gunicorn's threads: another tenant's requests are answered at once. The
runtime API and /metrics are answered only to the addresses the file allows."""

import os
import pwd
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import RUNTIME_TOKEN
from tests.system.workers import free_port

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
SLOW_CLIENTS = 200
METRICS_TOKEN = "test-metrics-token"
# The shipped allow list: every test connection comes from 127.0.0.1, so leaving these lines
# out makes nginx see an address it does not allow.
LOOPBACK_ALLOWED = ("        allow 127.0.0.1;\n", "        allow ::1;\n")


@pytest.fixture
def nginx(tmp_path):
    """nginx with deploy/nginx.conf's server, in front of the given gunicorn port; with
    allow_loopback=False, without the lines that allow loopback addresses."""
    started = []

    def start(upstream_port: int, allow_loopback: bool = True) -> str:
        port = free_port()
        site = Path("deploy/nginx.conf").read_text()
        if not allow_loopback:
            for line in LOOPBACK_ALLOWED:
                site = site.replace(line, "")
        site = site.replace("listen 80;", f"listen 127.0.0.1:{port};")
        site = site.replace("server 127.0.0.1:8000;", f"server 127.0.0.1:{upstream_port};")
        (tmp_path / "site.conf").write_text(site)
        user = pwd.getpwuid(os.geteuid()).pw_name
        temp = "\n".join(
            f"  {kind}_temp_path {tmp_path / kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        (tmp_path / "nginx.conf").write_text(
            f"user {user};\nworker_processes 1;\npid {tmp_path / 'nginx.pid'};\n"
            f"error_log {tmp_path / 'error.log'};\ndaemon off;\n"
            "events { worker_connections 2048; }\n"
            f"http {{\n  access_log off;\n{temp}\n  include {tmp_path / 'site.conf'};\n}}\n"
        )
        process = subprocess.Popen(
            [NGINX, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
            stderr=subprocess.PIPE,
        )
        started.append(process)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return f"http://127.0.0.1:{port}"
            except OSError:
                assert process.poll() is None, process.stderr.read().decode()
                time.sleep(0.05)
        raise RuntimeError("nginx did not start")

    yield start
    for process in started:
        process.terminate()
        process.wait(10)
        process.stderr.close()


class SlowClients:
    """Connections that send a request's head one byte every 2 seconds."""

    HEAD = b"GET /api/v1/agents HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Api-Key: dkl_slow\r\n"

    def __init__(self, base_url: str, count: int) -> None:
        host, port = base_url.removeprefix("http://").split(":")
        self.sockets = []
        for _ in range(count):
            connection = socket.create_connection((host, int(port)), timeout=5)
            connection.setblocking(False)
            self.sockets.append(connection)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.trickle)
        self.thread.start()

    def trickle(self) -> None:
        sent = 0
        while not self.stop.wait(0 if sent == 0 else 2):
            byte = self.HEAD[sent % len(self.HEAD) : sent % len(self.HEAD) + 1]
            for connection in self.sockets:
                try:
                    connection.send(byte)
                except OSError:
                    pass
            sent += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for connection in self.sockets:
            connection.close()


def test_slow_clients_leave_another_tenants_requests_answered_behind_nginx(
    workers, redis_url, nginx, headers
):
    gunicorn = workers.start_web(REDIS_URL=redis_url)  # 2 workers x the shipped 4 threads
    base = nginx(int(gunicorn.rsplit(":", 1)[1]))
    # Warm both workers first (a worker's first request is slow on a busy machine): what is
    # measured is the slow clients' effect, not a cold start.
    for _ in range(4):
        assert requests.get(base + "/api/v1/agents", headers=headers, timeout=30).ok
    slow = SlowClients(base, SLOW_CLIENTS)
    try:
        time.sleep(3)  # every slow client has sent a byte or two, and holds its connection
        timings = []
        for _ in range(10):
            started = time.monotonic()
            response = requests.get(base + "/api/v1/agents", headers=headers, timeout=5)
            timings.append(time.monotonic() - started)
            assert response.status_code == 200
        assert max(timings) < 1.0, timings
    finally:
        slow.close()


def test_nginx_refuses_a_body_over_the_limit_in_the_error_body(workers, redis_url, nginx, headers):
    gunicorn = workers.start_web(workers=1, REDIS_URL=redis_url)
    base = nginx(int(gunicorn.rsplit(":", 1)[1]))
    chunks = (b"x" * 65536 for _ in range(48))  # 3 MiB, chunked
    response = requests.post(
        base + "/api/v1/agents",
        data=chunks,
        headers={**headers, "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    # What the app answers itself still comes through: its 404 in the JSON error body.
    # A cold gunicorn worker may take seconds to serve its first request on a loaded host.
    assert_error_body = requests.get(base + "/api/v1/nothing", headers=headers, timeout=30)
    assert assert_error_body.json()["error"]["code"] == "not_found"


def private_requests(base: str) -> dict[str, requests.Response]:
    """The runtime API and /metrics, each with its token, under the spellings a client might
    try to slip past a rule on the path."""
    runtime = {"Authorization": f"Bearer {RUNTIME_TOKEN}"}
    answers = {
        path: requests.post(base + path, json={"max": 1}, headers=runtime, timeout=10)
        for path in ("/internal/v1/dispatch", "/%69nternal/v1/dispatch", "//internal/v1/dispatch")
    }
    metrics = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    answers["/metrics"] = requests.get(base + "/metrics", headers=metrics, timeout=10)
    return answers


def test_nginx_serves_the_runtime_api_and_metrics_to_loopback(workers, redis_url, nginx, headers):
    gunicorn = workers.start_web(
        workers=1, REDIS_URL=redis_url, RUNTIME_TOKEN=RUNTIME_TOKEN, METRICS_TOKEN=METRICS_TOKEN
    )
    base = nginx(int(gunicorn.rsplit(":", 1)[1]))
    answers = private_requests(base)
    for path in ("/internal/v1/dispatch", "/%69nternal/v1/dispatch"):
        assert answers[path].status_code == 200, (path, answers[path].text)
        assert answers[path].json() == {"calls": []}
    assert answers["/metrics"].status_code == 200
    assert "voiceagent_http_requests_total" in answers["/metrics"].text
    # The body limit holds on these paths too.
    chunks = (b"x" * 65536 for _ in range(48))
    response = requests.post(
        base + "/internal/v1/calls",
        data=chunks,
        headers={"Authorization": f"Bearer {RUNTIME_TOKEN}", "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


def test_nginx_answers_not_found_for_the_runtime_api_and_metrics_to_other_addresses(
    workers, redis_url, nginx, headers
):
    gunicorn = workers.start_web(
        workers=1, REDIS_URL=redis_url, RUNTIME_TOKEN=RUNTIME_TOKEN, METRICS_TOKEN=METRICS_TOKEN
    )
    base = nginx(int(gunicorn.rsplit(":", 1)[1]), allow_loopback=False)
    for path, response in private_requests(base).items():
        assert response.status_code == 404, (path, response.status_code, response.text)
        assert response.headers["Content-Type"] == "application/json"
        assert response.json() == {
            "error": {
                "code": "not_found",
                "message": "The requested resource was not found.",
                "details": {},
            }
        }
    # Everything else is served as before.
    assert requests.get(base + "/api/v1/agents", headers=headers, timeout=10).status_code == 200
    assert requests.get(base + "/healthz", timeout=10).status_code == 200
