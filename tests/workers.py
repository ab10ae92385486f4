"""Real worker.py processes for the tests, on the test's database and Redis."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEEDS = {
    "WEBHOOK_RETRY_SCALE": "0.001",  # 5 s becomes 5 ms, 5 min 0.3 s
    "WEBHOOK_LEASE_SECONDS": "3",
    "SWEEP_INTERVAL": "0.2",
}


class Workers:
    """Starts worker.py processes on the app's database and Redis; stops them all at the end."""

    def __init__(self, app, log_dir: Path) -> None:
        self.app = app
        self.log_dir = log_dir
        self.processes: list[subprocess.Popen] = []

    def start(self, redis_url: str | None = None, queues: tuple[str, ...] = ()) -> subprocess.Popen:
        env = {
            **os.environ,
            "DATABASE_URL": self.app.config["DATABASE_URL"],
            "REDIS_URL": redis_url or self.app.config["REDIS_URL"],
            "QUEUE_MODE": "rq",
            "ALLOW_PRIVATE_URLS": "1",
            **SPEEDS,
        }
        with open(self.log_dir / f"worker-{len(self.processes)}.log", "w") as log:
            process = subprocess.Popen(
                [sys.executable, "worker.py", *queues], cwd=ROOT, env=env, stdout=log, stderr=log
            )
        self.processes.append(process)
        return process

    def logs(self) -> str:
        return "\n".join(path.read_text()[-3000:] for path in sorted(self.log_dir.glob("*.log")))

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(10)
