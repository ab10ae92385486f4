"""The bridge is a distribution of its own: it declares none of the service's dependencies
and imports nothing of the service, so `pip install ./bridge` runs it without them."""

import ast
import re
import tomllib
from pathlib import Path

from tests.system.workers import ROOT

BRIDGE = ROOT / "bridge"
# The service, and the packages only the service installs.
SERVICE_MODULES = {"app", "flask", "flask_smorest", "peewee", "playhouse", "psycopg2", "rq"}


def names(requirements: list[str]) -> set[str]:
    """The distributions a list of requirements names, normalised (PEP 503)."""
    return {
        re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", each)[0]).lower()
        for each in requirements
    }


def imported_modules(path: Path) -> set[str]:
    """The top-level modules a file imports (absolute imports only)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module.split(".")[0])
    return modules


def test_the_bridge_declares_none_of_the_services_dependencies():
    bridge = tomllib.loads((BRIDGE / "pyproject.toml").read_text())["project"]
    service = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = names(bridge["dependencies"])
    assert {"aiohttp", "pipecat-ai"} <= declared
    assert declared & names(service["dependencies"]) == set()
    assert "voice-agent-api" not in declared


def test_the_bridge_imports_nothing_of_the_service():
    offending = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in BRIDGE.rglob("*.py")
        for module in imported_modules(path)
        if module in SERVICE_MODULES
    }
    assert offending == set()


def test_the_check_finds_an_import_of_the_service(tmp_path):
    module = tmp_path / "module.py"
    module.write_text("import os\nfrom app.services import calls\nimport peewee\n")
    assert imported_modules(module) & SERVICE_MODULES == {"app", "peewee"}
