"""docs/deploy.md's setup as an operator follows it, as root: the guide's commands that make
the service user, its folders and the settings file, the settings edited, the web unit
started as systemd starts it (deploy/systemd/voiceagent-web.service), then the guide's setup
block as written. It ends with a tenant, an API key that the API answers, and the
dashboard's owner, who can sign in.

The paths move into a temporary folder and the user gets a name of its own; nothing else of
the commands changes.
"""

import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import requests

from tests.conftest import fresh_database_url, using_postgres
from tests.system.workers import ROOT, free_port

GUIDE = ROOT / "docs" / "deploy.md"
WEB_UNIT = ROOT / "deploy" / "systemd" / "voiceagent-web.service"
VENV = Path(sys.prefix)
PASSWORD = "correct horse battery"
# The root shell of an operator: nothing of the test run's settings.
ROOT_SHELL = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "HOME": "/root"}

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="makes a system user: needs root"),
    pytest.mark.skipif(shutil.which("useradd") is None, reason="needs useradd"),
]


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```$", text, flags=re.M | re.S)


def guide_steps() -> tuple[list[str], str]:
    """The install block's commands that make the user, its folders and the settings file
    (the rest installs packages and units), and the setup block."""
    blocks = shell_blocks(GUIDE.read_text())
    [install] = [block for block in blocks if "useradd" in block]
    [setup] = [block for block in blocks if "tenants create" in block]
    commands = [
        line for line in install.splitlines() if line.startswith(("useradd ", "mkdir ", "install "))
    ]
    return commands, setup


class Layout:
    """The guide's paths in a temporary folder, and its user under a name of its own."""

    def __init__(self, base: Path, user: str) -> None:
        self.base = base
        self.user = user
        self.srv = base / "srv" / "voiceagent"
        self.etc = base / "etc" / "voiceagent"
        self.settings: dict[str, str] = {}  # what this machine's Python needs, if anything

    def __call__(self, text: str) -> str:
        """The text with the guide's paths and user name replaced."""
        text = text.replace("/srv/voiceagent", "\0srv").replace("/etc/voiceagent", "\0etc")
        text = re.sub(r"(?<![\w./-])voiceagent(?![\w.-])", self.user, text)
        return text.replace("\0srv", str(self.srv)).replace("\0etc", str(self.etc))


def runnable_by_others(path: Path) -> bool:
    return all(step.stat().st_mode & stat.S_IXOTH for step in (path, *path.parents))


def link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def venv_for_the_service_user(venv: Path, base: Path) -> dict[str, str]:
    """At venv, what the guide's `python3 -m venv .venv && .venv/bin/pip install .` leaves:
    this run's venv, when the service user can run its Python. A Python built under /root
    (pyenv) is root's alone: the user then gets a venv of its own on a copy of that Python
    in base, with this run's packages. The settings its processes need are returned."""
    python = Path(sys._base_executable).resolve()
    if runnable_by_others(python):
        venv.symlink_to(VENV)
        return {}
    # Hard links where it can: never inside the checkout, whose `chown -R` in the guide would
    # change the owner of the files they share with root's Python.
    copy = base / "python"
    (copy / "bin").mkdir(parents=True)
    link_or_copy(str(python), str(copy / "bin" / python.name))
    (copy / "lib").mkdir()
    for shared in Path(sysconfig.get_config_var("LIBDIR")).glob("libpython*.so*"):
        link_or_copy(str(shared), str(copy / "lib" / shared.name))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    shutil.copytree(
        stdlib,
        copy / "lib" / stdlib.name,
        copy_function=link_or_copy,
        ignore=shutil.ignore_patterns("site-packages", "test"),
    )
    settings = {"LD_LIBRARY_PATH": str(copy / "lib")}  # its own libpython, not root's
    subprocess.run(
        [copy / "bin" / python.name, "-m", "venv", "--without-pip", venv], env=settings, check=True
    )
    [site] = venv.glob("lib/python3*/site-packages")
    packages = sysconfig.get_paths()["purelib"]
    (site / "packages.pth").write_text(f"import site; site.addsitedir({packages!r})\n")
    for script in ("flask", "gunicorn"):
        body = (VENV / "bin" / script).read_text().split("\n", 1)[1]
        (venv / "bin" / script).write_text(f"#!{venv / 'bin' / 'python'}\n{body}")
        (venv / "bin" / script).chmod(0o755)
    return settings


@pytest.fixture
def layout():
    """A folder the new user can reach (pytest's own are root's alone), holding the checkout
    as the guide's clone and venv leave it; the user and the folder are removed at the end."""
    base = Path(tempfile.mkdtemp(prefix="voiceagent-deploy-"))
    base.chmod(0o755)
    paths = Layout(base, f"va{uuid.uuid4().hex[:10]}")
    (base / "etc").mkdir(mode=0o755)
    shutil.copytree(ROOT / "app", paths.srv / "app", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "deploy", paths.srv / "deploy")
    for name in ("pyproject.toml", "wsgi.py", "worker.py"):
        shutil.copy2(ROOT / name, paths.srv / name)
    for folder in (base / "srv", paths.srv):
        folder.chmod(0o755)
    try:
        paths.settings = venv_for_the_service_user(paths.srv / ".venv", base)
        yield paths
    finally:
        subprocess.run(["userdel", paths.user], capture_output=True)
        shutil.rmtree(base)


def environment_file(path: Path) -> dict[str, str]:
    """The variables of a systemd EnvironmentFile (read as root, as systemd does)."""
    variables = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";")):
            name, _, value = line.partition("=")
            variables[name.strip()] = value.strip().strip('"')
    return variables


def unit_settings(path: Path) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", ";", "[")):
            name, _, value = line.partition("=")
            settings.setdefault(name, []).append(value)
    return settings


def edit_settings(path: Path, paths: Layout, changes: dict[str, str]) -> None:
    """What the operator does in their editor: set some values (the file keeps its owner
    and mode). The guide's paths move to the test's folder."""
    lines = []
    for line in paths(path.read_text()).splitlines():
        name = line.partition("=")[0]
        if not line.startswith("#") and name in changes:
            line = f"{name}={changes.pop(name)}"
        lines.append(line)
    lines += [f"{name}={value}" for name, value in changes.items()]
    with open(path, "r+") as settings:
        settings.write("\n".join(lines) + "\n")
        settings.truncate()


class WebUnit:
    """deploy/systemd/voiceagent-web.service as systemd runs it: the EnvironmentFile read by
    root, then ExecStartPre and ExecStart as User, in WorkingDirectory."""

    def __init__(self, paths: Layout) -> None:
        unit = {
            name: [paths(value) for value in values]
            for name, values in unit_settings(WEB_UNIT).items()
        }
        [self.user], [self.group] = unit["User"], unit["Group"]
        [self.folder], [environment] = unit["WorkingDirectory"], unit["EnvironmentFile"]
        self.env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            **environment_file(Path(environment)),
        }
        self.before = [shlex.split(command) for command in unit["ExecStartPre"]]
        [start] = unit["ExecStart"]
        self.start = shlex.split(start)
        self.log = paths.base / "web.log"
        self.process: subprocess.Popen | None = None

    def as_user(self) -> dict:
        return {
            "cwd": self.folder,
            "env": self.env,
            "user": self.user,
            "group": self.group,
            "extra_groups": [],
        }

    def run(self) -> str:
        for command in self.before:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=120, **self.as_user()
            )
            assert done.returncode == 0, f"{command}:\n{done.stdout}{done.stderr}"
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                self.start, stdout=log, stderr=log, start_new_session=True, **self.as_user()
            )
        host, port = self.env["BIND"].rsplit(":", 1)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                socket.create_connection((host, int(port)), timeout=0.2).close()
                return f"http://{host}:{port}"
            except OSError:
                time.sleep(0.1)
        raise AssertionError("gunicorn did not start:\n" + self.log.read_text())

    def stop(self) -> None:
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(30)


def test_the_guide_has_the_steps_this_test_runs():
    commands, setup = guide_steps()
    assert any(command.startswith("useradd --system") for command in commands)
    assert any("/etc/voiceagent/env" in command for command in commands)
    for needed in ("tenants create", "keys create", "users create", "--role owner", "/readyz"):
        assert needed in setup


def test_the_deploy_guide_setup_runs_as_written(layout, database_template, tmp_path, redis_url):
    commands, setup = guide_steps()
    done = subprocess.run(
        ["bash", "-ec", layout("\n".join(commands))],
        cwd=layout.srv,
        env=ROOT_SHELL,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr

    settings = layout.etc / "env"
    status = settings.stat()
    assert status.st_uid == 0
    assert stat.S_IMODE(status.st_mode) & 0o007 == 0, "others may read the settings"
    assert stat.S_IMODE(layout.etc.stat().st_mode) & 0o007 == 0
    port = free_port()
    changes = {
        "REDIS_URL": redis_url,
        "SECRET_KEY": secrets.token_hex(32),
        "RUNTIME_TOKEN": secrets.token_urlsafe(32),
        "METRICS_TOKEN": secrets.token_urlsafe(32),
        "BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": "1",
        **layout.settings,
    }
    if using_postgres():
        changes["DATABASE_URL"] = fresh_database_url(database_template, tmp_path)
    edit_settings(settings, layout, changes)

    web = WebUnit(layout)
    try:
        base = web.run()
        script = layout(setup).replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        # A session of its own: no terminal, so the password prompt reads stdin.
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=layout.srv,
            env=ROOT_SHELL,
            input=f"{PASSWORD}\n{PASSWORD}\n",
            capture_output=True,
            text=True,
            timeout=180,
            start_new_session=True,
        )
        output = done.stdout + done.stderr
        assert "Created tenant" in done.stdout, output
        assert "Created owner ana@acme.example" in done.stdout, output
        assert '"status":"ready"' in done.stdout.replace(" ", ""), output
        [key] = re.findall(r"^dkl_\S+$", done.stdout, flags=re.M)

        agents = requests.get(f"{base}/api/v1/agents", headers={"X-Api-Key": key}, timeout=10)
        assert agents.status_code == 200, agents.text
        assert agents.json() == {"agents": []}
        page = requests.get(f"{base}/dashboard/sign-in", timeout=10)
        token = re.search(r'name="csrf_token"[^>]* value="([^"]+)"', page.text)
        assert token, page.text
        # The session cookie is Secure (served over TLS by nginx): sent back by hand here.
        cookie = "; ".join(f"{c.name}={c.value}" for c in page.cookies)
        signed_in = requests.post(
            f"{base}/dashboard/sign-in",
            data={"email": "ana@acme.example", "password": PASSWORD, "csrf_token": token[1]},
            headers={"Cookie": cookie},
            allow_redirects=False,
            timeout=10,
        )
        assert signed_in.status_code == 302, signed_in.text
    finally:
        web.stop()
