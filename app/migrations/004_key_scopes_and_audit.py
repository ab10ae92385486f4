"""API keys gain a scope (full, or read: GET only) and an optional expiry; the audit log
records who changed what from the dashboard or the CLI."""

import peewee as pw
from peewee_migrate import Migrator


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.add_fields(
        "api_key",
        scope=pw.CharField(max_length=8, default="full"),
        expires_at=pw.DateTimeField(null=True),
    )

    @migrator.create_model
    class AuditEntry(pw.Model):
        id = pw.CharField(max_length=32, primary_key=True)
        tenant = pw.ForeignKeyField(
            column_name="tenant_id",
            field="id",
            model=migrator.orm["tenant"],
            on_delete="CASCADE",
            null=True,
        )
        created_at = pw.DateTimeField()
        actor_type = pw.CharField(max_length=8)
        actor_id = pw.CharField(max_length=32, null=True)
        actor_label = pw.CharField(max_length=255)
        action = pw.CharField(max_length=64)
        target_id = pw.CharField(max_length=64, null=True)
        address = pw.CharField(max_length=45, null=True)
        details = pw.TextField()

        class Meta:
            table_name = "audit_entry"
            indexes = [
                (("tenant", "created_at", "id"), False),
                (("action", "actor_label", "created_at"), False),
                (("action", "address", "created_at"), False),
            ]


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.remove_model("audit_entry")
    migrator.remove_fields("api_key", "scope", "expires_at")
