"""The service never imports the runtime bridge: it is an optional extra for voice runtimes."""

import ast
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app"
OPTIONAL = ("voiceagent_bridge", "pipecat")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def test_app_imports_nothing_of_the_bridge_or_pipecat():
    offending = {
        f"{path.relative_to(APP.parent)}: {module}"
        for path in APP.rglob("*.py")
        for module in imported_modules(path)
        if module.split(".")[0] in OPTIONAL
    }
    assert offending == set()


def test_the_check_finds_an_import_of_the_bridge(tmp_path):
    module = tmp_path / "module.py"
    module.write_text("import os\nfrom voiceagent_bridge.client import RuntimeClient\n")
    assert "voiceagent_bridge.client" in imported_modules(module)
