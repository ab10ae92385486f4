"""What the dashboard wrote to the audit log, for the tests of its pages."""

from typing import Any

from app.models import AuditEntry

SIGN_INS = ("user.signed_in", "user.sign_in_failed")


def changes() -> list[tuple[str, str | None, dict[str, Any]]]:
    """(action, target id, details) of every change a dashboard user made (not the test's
    own setup, nor the API's, nor sign-ins), oldest first."""
    entries = (
        AuditEntry.select()
        .where((AuditEntry.actor_type == "user") & AuditEntry.action.not_in(SIGN_INS))
        .order_by(AuditEntry.created_at, AuditEntry.id)
    )
    return [(entry.action, entry.target_id, entry.details) for entry in entries]
