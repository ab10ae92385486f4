"""The audit log filtered by action (GET /audit-log?action=…), newest first: an index that
leads with the tenant and the action."""

import peewee as pw
from peewee_migrate import Migrator


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.add_index("audit_entry", "tenant", "action", "created_at", "id")


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.drop_index("audit_entry", "tenant", "action", "created_at", "id")
