"""make run as a new user meets it: a copy of the project, the README's CLI commands in
another shell, and a second make run while the first one serves."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.receiver import Answer, Receiver

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("make") is None, reason="needs make"),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Project:
    """A copy of the project in a temporary folder, run with this venv's packages.

    Its own app/ comes first on the path of every flask command run in it, so its instance/
    folder (config.py and the database) is the copy's, not the checkout's.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        shutil.copytree(ROOT / "app", folder / "app", ignore=shutil.ignore_patterns("__pycache__"))
        for name in ("Makefile", "pyproject.toml", "wsgi.py"):
            shutil.copy2(ROOT / name, folder / name)
        # A shell of its own: nothing of the test run's settings (DATABASE_URL, ...).
        self.env = {"PATH": os.environ["PATH"], "HOME": str(folder), "LANG": "C.UTF-8"}

    def make_run(self, port: int) -> list[str]:
        # -o: the venv is this one, installed already; make must not reinstall it here.
        return ["make", "-o", f"{VENV}/bin/.installed", "run", f"PORT={port}", f"VENV={VENV}"]

    def start(self, command: list[str], log: Path) -> subprocess.Popen:
        with open(log, "w") as out:
            return subprocess.Popen(
                command,
                cwd=self.folder,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def run(self, *command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            command, cwd=self.folder, env=self.env, capture_output=True, text=True, timeout=120
        )

    def flask(self, *args: str) -> subprocess.CompletedProcess:
        """A command from the README's CLI section, in another shell: no FLASK_APP, no
        settings in the environment."""
        return self.run(str(VENV / "bin" / "flask"), *args)


def wait_for_line(log: Path, text: str, process: subprocess.Popen, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    return log.read_text()


@pytest.fixture
def serving(tmp_path):
    """A first make run, serving; stopped (the whole process group) at the end."""
    project = Project(tmp_path / "project")
    port = free_port()
    log = tmp_path / "make-run.log"
    process = project.start(project.make_run(port), log)
    try:
        output = wait_for_line(log, f"Running on http://127.0.0.1:{port}", process)
        yield project, port, output
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def demo_key(output: str) -> str:
    [line] = [line for line in output.splitlines() if line.startswith("API key")]
    return line.split()[-1]


def test_make_run_writes_the_settings_every_flask_command_reads(serving):
    project, port, output = serving
    config = project.folder / "instance" / "config.py"
    assert "Wrote the development settings to instance/config.py" in output
    assert "ALLOW_PRIVATE_URLS = True" in config.read_text()
    assert "Runtime API token (Authorization: Bearer ...): dev-runtime-token" in output
    assert "\x1b[" not in output
    api = f"http://127.0.0.1:{port}/api/v1"
    headers = {"x-api-key": demo_key(output)}
    [agent] = requests.get(f"{api}/agents", headers=headers, timeout=10).json()["agents"]
    with Receiver(lambda request: Answer(body=b'{"open": "09:00"}')) as receiver:
        created = requests.post(
            f"{api}/webhooks",
            json={"url": receiver.url, "events": ["call.ended"], "secret": "s" * 16},
            headers=headers,
            timeout=10,
        )
        assert created.status_code == 201, created.text
        created = requests.post(
            f"{api}/agents/{agent['id']}/functions",
            json={
                "name": "opening_hours",
                "description": "Opening hours.",
                "endpoint": receiver.url,
                "parameters": {"type": "object", "properties": {}},
            },
            headers=headers,
            timeout=10,
        )
        assert created.status_code == 201, created.text
        call = project.flask(
            "calls", "simulate", "--did", "+6221555010", "--function", "opening_hours"
        )
        assert call.returncode == 0, call.stderr
        assert 'Function opening_hours: {"result": {"open": "09:00"}}' in call.stdout
        listed = project.flask("deliveries", "list", "--status", "succeeded")
    bodies = [request.json() for request in receiver.requests]
    assert [body.get("functionName") or body["event"] for body in bodies] == [
        "opening_hours",
        "call.ended",
    ]
    assert "call.ended  succeeded  attempts=1" in listed.stdout, listed.stdout
    runtime = requests.get(
        f"http://127.0.0.1:{port}/internal/v1/calls/call_none",
        headers={"Authorization": "Bearer dev-runtime-token"},
        timeout=10,
    )
    assert runtime.status_code in (404, 405)  # not 401 or 503: the server has the token


def test_make_run_keeps_a_users_config_and_says_what_it_lacks(tmp_path):
    project = Project(tmp_path / "project")
    (project.folder / "instance").mkdir()
    (project.folder / "instance" / "config.py").write_text('LOG_FORMAT = "text"\n')
    port = free_port()
    log = tmp_path / "make-run.log"
    process = project.start(project.make_run(port), log)
    try:
        output = wait_for_line(log, f"Running on http://127.0.0.1:{port}", process)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    assert (project.folder / "instance" / "config.py").read_text() == 'LOG_FORMAT = "text"\n'
    assert (
        "instance/config.py exists and is kept as it is, but does not set "
        "ALLOW_PRIVATE_URLS = True and RUNTIME_TOKEN" in output
    )
    assert "Runtime API off: RUNTIME_TOKEN is not set." in output


def test_a_second_make_run_fails_on_the_busy_port_and_keeps_the_demo_key(serving):
    project, port, output = serving
    second = project.run(*project.make_run(port))
    assert second.returncode != 0
    assert second.stdout == ""  # neither db upgrade nor demo ran
    [message, make_error] = second.stderr.splitlines()
    assert message.startswith(f"Error: Port {port} on 127.0.0.1 is in use")
    assert "make run PORT=" in message
    assert make_error.startswith("make: ***")
    agents = requests.get(
        f"http://127.0.0.1:{port}/api/v1/agents",
        headers={"x-api-key": demo_key(output)},
        timeout=10,
    )
    assert agents.status_code == 200


def test_git_ignores_the_instance_config():
    if shutil.which("git") is None:
        pytest.skip("needs git")
    checkout = subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True)
    if checkout.returncode != 0:
        pytest.skip("not a git checkout")
    ignored = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--no-index", "instance/config.py"],
        capture_output=True,
    )
    assert ignored.returncode == 0
