"""Real worker.py and gunicorn processes for the tests, on the test's database and Redis."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import ACTOR

ROOT = Path(__file__).resolve().parents[2]
SPEEDS = {
    "WEBHOOK_RETRY_SCALE": "0.001",  # 5 s becomes 5 ms, 5 min 0.3 s
    "WEBHOOK_LEASE_SECONDS": "3",
    "SWEEP_INTERVAL": "0.2",
    # An attempt takes at most 1.5 s, well within the lease.
    "WEBHOOK_CONNECT_TIMEOUT": "0.5",
    "WEBHOOK_TIMEOUT": "1",
}


WEBHOOK_SECRET = "worker-test-secret-value"


def rq_config(app_config: dict, redis_url: str) -> dict:
    """The test app's settings for real queues: Redis, rq mode and the SPEEDS."""
    return {
        **app_config,
        "REDIS_URL": redis_url,
        "QUEUE_MODE": "rq",
        **{name: float(value) for name, value in SPEEDS.items()},
    }


def register_webhook(tenant, url: str, events=("call.ended",)):
    """A webhook of tenant signed with WEBHOOK_SECRET."""
    from app.services import webhooks as webhook_service

    return webhook_service.create_webhook(
        actor=ACTOR, tenant=tenant, url=url, events=list(events), secret=WEBHOOK_SECRET
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(condition, timeout: float, message: str, workers=None) -> None:
    """Poll condition until it holds; fail after timeout seconds (with the processes' logs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(message + ("\n" + workers.logs() if workers else ""))


class ThrowawayRedis:
    """A redis-server of our own on a free port, without persistence: stop loses everything."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


POOL_SIZES = {
    "functions": "FUNCTION_WORKERS",
    "function_tests": "FUNCTION_TEST_WORKERS",
    "webhooks": "WEBHOOK_WORKERS",
    "webhooks_slow": "WEBHOOK_SLOW_WORKERS",
    "whatsapp": "WHATSAPP_WORKERS",
    "analysis": "ANALYSIS_WORKERS",
}


def wait_for_worker(workers, redis_client, queues, timeout: float = 20) -> None:
    """Wait until worker.py serves every one of queues with its whole pool (RQ's registry of
    workers): a signal sent before then would find some of the pool still starting."""

    def serving() -> bool:
        from rq import Worker

        served = [name for worker in Worker.all(redis_client) for name in worker.queue_names()]
        return all(served.count(name) >= workers.app.config[POOL_SIZES[name]] for name in queues)

    wait_until(serving, timeout, "the worker did not start", workers)


def wait_for_reconnect(workers, redis_client, timeout: float = 20) -> None:
    """Wait until a worker waits on a queue of a Redis that restarted empty: RQ's workers
    connect again by themselves, but do not register again in its registry of workers."""

    def waiting() -> bool:
        return any(client.get("cmd") == "blmove" for client in redis_client.client_list())

    wait_until(waiting, timeout, "no worker waits on the restarted Redis", workers)


class Workers:
    """Starts worker.py (and gunicorn) processes on the app's database and Redis; stops them
    all at the end. Keyword settings override the environment of the process started."""

    def __init__(self, app, log_dir: Path) -> None:
        self.app = app
        self.log_dir = log_dir
        self.processes: list[subprocess.Popen] = []

    def _spawn(self, args: list[str], redis_url: str | None, settings: dict) -> subprocess.Popen:
        env = {
            **os.environ,
            "DATABASE_URL": self.app.config["DATABASE_URL"],
            "REDIS_URL": redis_url or self.app.config["REDIS_URL"],
            "QUEUE_MODE": "rq",
            "ALLOW_PRIVATE_URLS": "1",
            **SPEEDS,
            **{name: str(value) for name, value in settings.items()},
        }
        with open(self.log_dir / f"{Path(args[0]).stem}-{len(self.processes)}.log", "w") as log:
            # A session of its own: killing it kills every process it started, as a host
            # (or systemd's control group) going down does.
            process = subprocess.Popen(
                args, cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True
            )
        self.processes.append(process)
        return process

    def start(
        self, redis_url: str | None = None, queues: tuple[str, ...] = (), **settings
    ) -> subprocess.Popen:
        return self._spawn([sys.executable, "worker.py", *queues], redis_url, settings)

    def start_flask(self, *args: str, **settings) -> subprocess.Popen:
        """A flask command (`flask calls dispatch-demo …`) on the app's database, and on its
        Redis, or inline when the app has none."""
        if not self.app.config.get("REDIS_URL"):
            settings = {"REDIS_URL": "", "QUEUE_MODE": "inline", **settings}
        flask = str(Path(sys.executable).parent / "flask")
        return self._spawn([flask, *args], None, {"FLASK_APP": "wsgi", **settings})

    def start_web(self, workers: int = 2, port: int | None = None, **settings) -> str:
        """gunicorn with deploy/gunicorn.conf.py on a loopback port (a free one unless
        given); its base URL."""
        port = port or free_port()
        self._spawn(
            [str(Path(sys.executable).parent / "gunicorn"), "-c", "deploy/gunicorn.conf.py",
             "wsgi:app"],
            None,
            {
                "WEB_CONCURRENCY": workers,
                "BIND": f"127.0.0.1:{port}",
                "PROMETHEUS_MULTIPROC_DIR": self.log_dir / "prometheus",
                **settings,
            },
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return f"http://127.0.0.1:{port}"
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("gunicorn did not start:\n" + self.logs())

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(path.read_text()[-tail:] for path in sorted(self.log_dir.glob("*.log")))

    @staticmethod
    def kill(process: subprocess.Popen) -> None:
        """SIGKILL the process and every process it started (worker pools, gunicorn workers)."""
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(10)

    def stop(self) -> None:
        for process in self.processes:
            self.kill(process)
