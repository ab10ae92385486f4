"""A TypeScript client generated from the served OpenAPI document (openapi-typescript) types
every event: tsc type-checks a handler of each event (tests/system/typescript/handlers.ts), and
refuses the one deliberate mistake beside it (tests/system/typescript/mistake.ts), so the check can
fail.

The tools are npm packages pinned by tests/system/typescript/package-lock.json, installed with
`npm ci` into tests/system/typescript/node_modules when that folder does not match the lock (npm's
own cache makes a reinstall work offline). Without npm the run stops and says so.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

FOLDER = Path(__file__).parent / "typescript"
TOOLS = FOLDER / "node_modules"
INSTALLED_LOCK = TOOLS / ".package-lock.json"  # what npm ci installed, written by npm
SOURCES = ("handlers.ts", "mistake.ts", "tsconfig.json")


def installed() -> bool:
    """Whether node_modules holds what the lock pins (npm writes its own copy of the lock)."""
    if not INSTALLED_LOCK.is_file():
        return False
    wanted = json.loads((FOLDER / "package-lock.json").read_text())["packages"]
    have = json.loads(INSTALLED_LOCK.read_text())["packages"]
    return {name: entry.get("version") for name, entry in wanted.items() if name} == {
        name: entry.get("version") for name, entry in have.items()
    }


@pytest.fixture(scope="module")
def tools() -> Path:
    """The folder of the installed tools' commands (openapi-typescript, tsc)."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.exit(
            "tests/system/test_typescript_client.py needs npm (Node.js 18 or newer) to install "
            "openapi-typescript and TypeScript. Install it (Debian: `apt-get install npm`).",
            returncode=3,
        )
    if not installed():
        done = subprocess.run(
            [npm, "ci", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=FOLDER, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    return TOOLS / ".bin"


def test_a_typescript_client_types_every_event(client, tools, tmp_path):
    document = tmp_path / "openapi.json"
    document.write_bytes(client.get("/api/v1/openapi.json").data)
    generated = subprocess.run(
        [tools / "openapi-typescript", document, "--output", tmp_path / "api.d.ts"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert generated.returncode == 0, generated.stdout + generated.stderr
    for name in SOURCES:
        shutil.copy(FOLDER / name, tmp_path / name)
    checked = subprocess.run(
        [tools / "tsc", "--project", tmp_path / "tsconfig.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    errors = re.findall(r"^(\S+\.ts)\((\d+),\d+\): error (TS\d+): (.*)$", checked.stdout, re.M)
    # handlers.ts type-checks; the mistake is the one error, where it was made.
    assert checked.returncode != 0 and len(errors) == 1, checked.stdout + checked.stderr
    ((file, line, code, message),) = errors
    assert (file, line, code) == ("mistake.ts", "7", "TS2339"), message
    assert "'durationSeconds' does not exist" in message
