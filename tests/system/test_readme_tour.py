"""The README's five-minute tour as a reader follows it: a fresh make run in a copy of the
project, then every shell block of the tour, in order, in one second shell. Each command must
succeed and print what its `# →` lines say (`…` stands for anything within a line).

The tour uses what make run sets up, SQLite in the copy's instance/ folder, so both passes of
make test run it on SQLite.
"""

import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass

import pytest

from tests.system.test_make_run import ROOT, VENV, Project, demo_key, free_port, wait_for_line

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("make") is None, reason="needs make"),
]

TOUR_HEADING = "## Five-minute tour"
ARROW = "# → "
STEP_MARK = "@@tour step {}@@"
FAILED_MARK = "@@tour failed {}@@"


@dataclass
class Step:
    command: str
    expected: list[str]


def tour_section(readme: str) -> str:
    start = readme.index(TOUR_HEADING)
    end = readme.find("\n## ", start + len(TOUR_HEADING))
    return readme[start : end if end != -1 else len(readme)]


def tour_steps(section: str) -> list[Step]:
    """Each ```sh block of the tour, cut at its blank lines: a step is one or more commands,
    then the `# →` lines of what they print."""
    steps = []
    for block in re.findall(r"^```sh\n(.*?)^```$", section, flags=re.M | re.S):
        for chunk in re.split(r"\n\s*\n", block.strip("\n")):
            lines = chunk.splitlines()
            command = [line for line in lines if not line.startswith(ARROW.strip())]
            expected = [line[len(ARROW) :] for line in lines if line.startswith(ARROW.strip())]
            assert lines[: len(command)] == command, f"a # → line before a command:\n{chunk}"
            steps.append(Step("\n".join(command), expected))
    return steps


def pattern(expected: str) -> re.Pattern[str]:
    """`…` stands for an id, a number or a time: no space and no quote."""
    return re.compile(r'[^\s"]*'.join(re.escape(part) for part in expected.split("…")))


def unmatched(expected: list[str], output: list[str]) -> str | None:
    """The first expected line not found, in order, among the output lines; None if all are."""
    lines = iter(output)
    for line in expected:
        if not any(pattern(line).fullmatch(got) for got in lines):
            return line
    return None


def test_tour_steps_are_read_from_the_readme():
    steps = tour_steps(tour_section((ROOT / "README.md").read_text()))
    commands = "\n".join(step.command for step in steps)
    assert len(steps) >= 10
    assert sum(bool(step.expected) for step in steps) >= 10
    for needed in ("export KEY=dkl_…", "/functions", "/test", "assign-agent", "/webhooks"):
        assert needed in commands
    assert "flask calls simulate" in commands
    assert "flask demo" not in commands  # it would issue another key mid-tour


def test_expected_lines_match_in_order_with_ellipses_for_ids():
    output = ["receiver: x", '{"id":"agent_42","ms":7,"name":"A"}', "done"]
    assert unmatched(['{"id":"agent_…","ms":…,"name":"A"}', "done"], output) is None
    assert unmatched(["done", "receiver: x"], output) == "receiver: x"
    assert unmatched(['{"id":"agent_…"}'], output) == '{"id":"agent_…"}'


def test_the_readme_tour_runs_in_order_on_a_fresh_make_run(tmp_path):
    for tool in ("curl", "jq"):
        assert shutil.which(tool), f"The README tour needs {tool}: apt-get install {tool}"
    steps = tour_steps(tour_section((ROOT / "README.md").read_text()))
    project = Project(tmp_path / "project")
    (project.folder / ".venv").symlink_to(VENV)  # the README's `. .venv/bin/activate`
    (project.folder / "docs" / "examples").mkdir(parents=True)
    shutil.copy2(ROOT / "docs" / "examples" / "receiver.py", project.folder / "docs" / "examples")

    port, receiver_port = free_port(), free_port()
    log = tmp_path / "make-run.log"
    server = project.start(project.make_run(port), log)
    try:
        key = demo_key(wait_for_line(log, f"Running on http://127.0.0.1:{port}", server))
        script = ["set -o pipefail", f"trap 'echo; echo \"{FAILED_MARK.format('$step')}\"' ERR"]
        for number, step in enumerate(steps):
            command = step.command.replace("export KEY=dkl_…", f"export KEY={key}")
            command = command.replace("127.0.0.1:5000", f"127.0.0.1:{port}")
            command = re.sub(r"\b8001\b", str(receiver_port), command)
            script += [f"step={number}; echo; echo '{STEP_MARK.format(number)}'", command]
        output_file = tmp_path / "tour.out"
        with open(output_file, "w") as out:
            # A session of its own: the receiver it starts in the background ends with it.
            shell = subprocess.Popen(
                ["bash", "-c", "\n".join(script)],
                cwd=project.folder,
                env=project.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                status = shell.wait(timeout=120)
            finally:
                try:
                    os.killpg(shell.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)

    output = output_file.read_text()
    assert status == 0, output
    pieces = re.split(r"^@@tour step (\d+)@@$", output, flags=re.M)
    assert [int(number) for number in pieces[1::2]] == list(range(len(steps))), output
    for step, printed in zip(steps, pieces[2::2], strict=True):
        lines = [line.rstrip() for line in printed.splitlines() if line.strip()]
        failed = [line for line in lines if line.startswith("@@tour failed")]
        assert not failed, f"This step of the tour failed:\n{step.command}\nIt printed:\n{printed}"
        missing = unmatched(step.expected, [line for line in lines if line not in failed])
        assert missing is None, (
            f"This step of the tour did not print {missing!r}:\n{step.command}\n"
            f"It printed:\n{printed}"
        )
