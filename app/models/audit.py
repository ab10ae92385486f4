"""The audit log."""

import peewee as pw

from app.db import BaseModel
from app.models.fields import JSONField, id_field
from app.models.tenants import Tenant
from app.util import utcnow


class AuditEntry(BaseModel):
    """A change made from the API, the dashboard or the CLI: when, who, what, which id, from
    where."""

    id = id_field()
    # None only for a failed sign-in with an email nobody has: it still counts towards the
    # sign-in throttle, and no tenant sees it.
    tenant = pw.ForeignKeyField(Tenant, backref="audit_entries", on_delete="CASCADE", null=True)
    created_at = pw.DateTimeField(default=utcnow)
    actor_type = pw.CharField(max_length=8)  # api_key | user | cli | runtime | system
    actor_id = pw.CharField(max_length=32, null=True)  # e.g. a user's id; no foreign key
    actor_label = pw.CharField(max_length=255)  # e.g. an email (the one tried, on a failure), "CLI"
    action = pw.CharField(max_length=64)  # key.created, user.sign_in_failed, …
    target_id = pw.CharField(max_length=64, null=True)
    address = pw.CharField(max_length=45, null=True)  # the client's IP address
    details = JSONField(default=dict)  # never a secret

    @property
    def actor(self) -> dict[str, str | None]:
        """Who made the change, as the API shows it: type, id and label."""
        return {"type": self.actor_type, "id": self.actor_id, "label": self.actor_label}

    class Meta:
        indexes = (
            (("tenant", "created_at", "id"), False),
            # GET /audit-log?action=…: one action's entries of a tenant, newest first.
            (("tenant", "action", "created_at", "id"), False),
            # Recent entries of one action for one email or one address (sign-in throttle).
            (("action", "actor_label", "created_at"), False),
            (("action", "address", "created_at"), False),
        )
