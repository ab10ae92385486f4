"""What the dashboard wrote to the audit log, for the tests of its pages."""

from typing import Any

from app.models import AuditEntry


def changes() -> list[tuple[str, str | None, dict[str, Any]]]:
    """(action, target id, details) of every entry but sign-ins, oldest first."""
    entries = (
        AuditEntry.select()
        .where(~AuditEntry.action.startswith("user."))
        .order_by(AuditEntry.created_at)
    )
    return [(entry.action, entry.target_id, entry.details) for entry in entries]
