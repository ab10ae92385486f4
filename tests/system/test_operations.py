"""Running it for real: gunicorn with deploy/gunicorn.conf.py and the workers started with the
systemd units' command lines, then health, metrics, logs, backups, pruning and upgrades."""

import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import peewee
import pytest
import requests
from peewee_migrate import Router

from app import db
from app.models import Call, Tenant
from app.services import billing
from app.services import keys as key_service
from app.services import phone_numbers as number_service
from app.services import tenants as tenant_service
from tests.call_flow import CALLER, backdate, end_body
from tests.conftest import RUNTIME_TOKEN
from tests.helpers import ACTOR
from tests.receiver import Answer, Receiver

ROOT = Path(__file__).resolve().parents[2]
METRICS_TOKEN = "metrics-token-for-tests"
WEBHOOK_SECRET = "operations-webhook-secret"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Deployment:
    """gunicorn and two workers, as the systemd units run them, on the test's database."""

    def __init__(self, database_url: str, redis_url: str, tmp: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.tmp = tmp
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "RUNTIME_TOKEN": RUNTIME_TOKEN,
            "METRICS_TOKEN": METRICS_TOKEN,
            "LOG_FORMAT": "json",
            "ALLOW_PRIVATE_URLS": "1",
            "BIND": f"127.0.0.1:{self.port}",
            "WEB_CONCURRENCY": "2",
            "PROMETHEUS_MULTIPROC_DIR": str(tmp / "prometheus"),
        }
        self.processes: dict[str, subprocess.Popen] = {}

    def run(self, name: str, *command: str) -> None:
        with open(self.tmp / f"{name}.log", "w") as log:
            # A session of its own, so that stopping it stops every process it started
            # (a worker's pool, gunicorn's workers), as systemd's control group does.
            self.processes[name] = subprocess.Popen(
                command, cwd=ROOT, env=self.env, stdout=log, stderr=log, start_new_session=True
            )

    def start(self) -> None:
        bin_dir = Path(sys.executable).parent
        self.run("web", str(bin_dir / "gunicorn"), "-c", "deploy/gunicorn.conf.py", "wsgi:app")
        self.wait_ready()
        self.run("functions", sys.executable, "worker.py", "functions")
        self.run("webhooks", sys.executable, "worker.py", "webhooks")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.get(self.base + "/healthz", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, self.logs()
            time.sleep(0.1)

    def logs(self) -> str:
        return "\n".join(p.read_text()[-2000:] for p in sorted(self.tmp.glob("*.log")))

    def stop(self) -> None:
        for process in self.processes.values():
            process.terminate()
        for process in self.processes.values():
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                pass
            # Whatever is left of its group (a pool's worker that outlived its parent would
            # take the next test's jobs from the same Redis database).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


@pytest.fixture
def deployment(app_config, redis_url, redis_client, tmp_path):
    deployed = Deployment(app_config["DATABASE_URL"], redis_url, tmp_path)
    yield deployed
    deployed.stop()


def test_deployment_serves_calls_and_reports_health_metrics_and_json_logs(
    app, deployment, tmp_path
):
    tenant = tenant_service.create_tenant(actor=ACTOR, name="ops", plan="business")
    api_key = key_service.create_key(actor=ACTOR, tenant=tenant, name="ops")[1]
    number = number_service.add_number(actor=ACTOR, tenant=tenant, display_number="+6221555077")
    billing.grant(actor=ACTOR, tenant=tenant, minutes=50)
    deployment.start()
    api = {"x-api-key": api_key}
    runtime = {"Authorization": f"Bearer {RUNTIME_TOKEN}"}
    base = deployment.base
    with Receiver() as receiver, Receiver(lambda r: Answer(body=b'{"ok": true}')) as endpoint:
        agent = requests.post(
            f"{base}/api/v1/agents", json={"name": "Ops", "systemPrompt": "Help."}, headers=api
        ).json()["id"]
        requests.post(
            f"{base}/api/v1/phone-numbers/{number.id}/assign-agent",
            json={"agentId": agent},
            headers=api,
        ).raise_for_status()
        requests.post(
            f"{base}/api/v1/webhooks",
            json={"url": receiver.url, "events": ["call.ended"], "secret": WEBHOOK_SECRET},
            headers=api,
        ).raise_for_status()
        requests.post(
            f"{base}/api/v1/agents/{agent}/functions",
            json={
                "name": "ping",
                "description": "Ping.",
                "endpoint": endpoint.url,
                "parameters": {"type": "object", "properties": {}},
            },
            headers=api,
        ).raise_for_status()
        for _ in range(3):
            call = requests.post(
                f"{base}/internal/v1/calls",
                json={"did": number.display_number, "callerNumber": CALLER},
                headers=runtime,
            ).json()["id"]
            requests.post(f"{base}/internal/v1/calls/{call}/answered", headers=runtime)
            outcome = requests.post(
                f"{base}/internal/v1/calls/{call}/function-calls",
                json={"functionName": "ping"},
                headers=runtime,
                timeout=10,
            ).json()
            assert outcome == {"result": {"ok": True}}
            backdate(call, end_body()["durationSeconds"])  # it lived as long as it reports
            requests.post(
                f"{base}/internal/v1/calls/{call}/ended", json=end_body(), headers=runtime
            ).raise_for_status()
        receiver.wait_for(3, timeout=30)

    ready = requests.get(f"{base}/readyz", timeout=5)
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "redis": "ok"}

    unauthorized = requests.get(f"{base}/metrics", timeout=5)
    assert unauthorized.status_code == 401
    metrics = requests.get(
        f"{base}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=5
    ).text
    for sample in (
        'voiceagent_http_requests_total{method="POST",route="/internal/v1/calls",status="201"}',
        'voiceagent_calls_total{status="ended"}',
        'voiceagent_webhook_attempts_total{attempt="1",outcome="success"}',
        'voiceagent_function_calls_total{result="ok"}',
        'voiceagent_queue_depth{queue="webhooks"}',
    ):
        assert sample in metrics, sample
    assert 'voiceagent_calls_total{status="ended"} 3.0' in metrics

    deployment.stop()
    lines = (tmp_path / "web.log").read_text().splitlines()
    request_lines = [json.loads(line) for line in lines if line.startswith("{")]
    assert len(request_lines) >= 20
    assert all(
        {"requestId", "route", "status", "durationMs"} <= set(entry)
        for entry in request_lines
        if entry["logger"] == "app.requests"
    )
    everything = deployment.logs()
    for secret in (api_key, RUNTIME_TOKEN, METRICS_TOKEN, WEBHOOK_SECRET):
        assert secret not in everything
    # The jobs ran (the webhook's attempts, the function call), and RQ's lines a job for them
    # are left out at the default JOB_LOG_LEVEL.
    for worker in ("functions", "webhooks"):
        assert "Job OK" not in (tmp_path / f"{worker}.log").read_text()


@pytest.mark.sqlite_only
def test_backup_while_the_service_writes(app, runner, tmp_path):
    """flask db backup from another process while a writer commits calls as fast as it can."""
    tenant = tenant_service.create_tenant(actor=ACTOR, name="busy", plan="business")
    stop, written = threading.Event(), []

    def writer():
        while not stop.is_set():
            with db.database.atomic():
                Tenant.update(calls_count=Tenant.calls_count + 1).where(
                    Tenant.id == tenant.id
                ).execute()
            written.append(1)
        db.database.close()

    thread = threading.Thread(target=writer)
    thread.start()
    target = tmp_path / "backup.db"
    try:
        while len(written) < 50:
            time.sleep(0.01)
        result = subprocess.run(
            [str(Path(sys.executable).parent / "flask"), "db", "backup", str(target)],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": app.config["DATABASE_URL"], "FLASK_APP": "wsgi"},
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        stop.set()
        thread.join()
    assert result.returncode == 0, result.stderr
    copy = sqlite3.connect(target)
    assert copy.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    counted = copy.execute("SELECT calls_count FROM tenant WHERE name = 'busy'").fetchone()[0]
    copy.close()
    assert 50 <= counted <= len(written)


NEXT_MIGRATION = """
import peewee as pw
from peewee_migrate import Migrator


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.add_fields("call", review_note=pw.CharField(max_length=2048, null=True))
    migrator.add_index("call", "tenant", "ended_at")


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.remove_fields("call", "review_note")
"""


def test_a_new_migration_upgrades_a_database_that_holds_data(
    app, tenant, did, client, runtime_headers, tmp_path
):
    """What `flask db upgrade` does after an upgrade that ships a migration, on data."""
    from tests.call_flow import whole_call

    call_id = whole_call(client, runtime_headers, did)
    migrations = tmp_path / "migrations"
    shutil.copytree(db.MIGRATIONS_DIR, migrations, ignore=shutil.ignore_patterns("__pycache__"))
    (migrations / "003_call_review_note.py").write_text(NEXT_MIGRATION)
    router = Router(db.database.obj, migrate_dir=migrations, ignore=["basemodel"])
    assert router.diff == ["003_call_review_note"]
    router.run()
    assert router.diff == []
    columns = {column.name for column in db.database.get_columns("call")}
    assert "review_note" in columns
    row = (
        Call.select(Call.status, Call.billed_minutes, peewee.SQL("review_note"))
        .where(Call.id == call_id)
        .tuples()
        .get()
    )
    assert row == ("ended", 2, None)
    assert Call.get_by_id(call_id).tenant_id == tenant.id
    assert client.get(f"/api/v1/calls/{call_id}", headers={}).status_code == 401
    assert isinstance(db.database.obj, peewee.Database)
