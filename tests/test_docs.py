"""The guides say what the code does: the event catalogue's data fields, the audit log's
parameters, fields and actions, and what serving the docs needs first."""

import re
from pathlib import Path

from app.resources.audit.schemas import AuditEntrySchema, AuditQueryArgsSchema
from app.resources.events.payloads import EVENT_DATA
from tests.test_audit_trail import API, CLI, DASHBOARD

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# Written by a failed sign-in, which no table of tests/test_audit_trail.py lists (it changes
# nothing): tests/services/test_audit.py has it.
SIGN_IN_FAILED = "user.sign_in_failed"


def section(page: str, title: str) -> str:
    """The section of a page under its ## title, up to the next ## title."""
    text = (DOCS / page).read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the Markdown tables in text (header and rule too)."""
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|")
    ]


def without_parentheses(text: str) -> str:
    while True:
        shorter = re.sub(r"\([^()]*\)", "", text)
        if shorter == text:
            return text
        text = shorter


def test_the_event_catalogue_lists_every_events_data_fields():
    """Each event's row names the fields of its data as app/resources/events/payloads.py
    defines them (a nested object's own fields, in parentheses, aside)."""
    documented = {}
    for cells in table_rows(section("webhooks.md", "Event catalogue")):
        name = re.fullmatch(r"`([a-z_.]+)`", cells[0])
        if name:
            documented[name.group(1)] = set(re.findall(r"`(\w+)`", without_parentheses(cells[2])))
    defined = {
        event: {field.data_key for field in schema().fields.values()}
        for event, (_, schema) in EVENT_DATA.items()
    }
    assert documented == defined


def test_the_api_guide_documents_the_audit_log():
    guide = section("api.md", "Audit log")
    assert "GET /audit-log" in guide
    for schema in (AuditQueryArgsSchema(), AuditEntrySchema()):
        for field in schema.fields.values():
            assert f"`{field.data_key}`" in guide, field.data_key
    actions = guide[guide.index("**Actions:**") :]
    documented = {
        action
        for cells in table_rows(actions)
        for action in re.findall(r"`([a-z_]+\.[a-z_]+)`", cells[0])
    }
    written = {change.action for change in [*API.values(), *DASHBOARD.values()]}
    written |= {change.action for _, change in CLI.values()} | {SIGN_IN_FAILED}
    assert documented == written


def test_serving_the_docs_says_to_install_the_development_tools_first():
    """mkdocs comes with make install-dev, not with make run's install."""
    for path in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for paragraph in re.split(r"\n\s*\n", path.read_text()):
            if "mkdocs serve" in paragraph:
                assert "make install-dev" in paragraph, (path.name, paragraph)
