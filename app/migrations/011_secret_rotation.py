"""Secret rotation without downtime: a webhook's and a function's previous secret, which signs
beside the new one until previous_secret_expires_at (the rotation's overlap)."""

import peewee as pw
from peewee_migrate import Migrator


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    for table in ("webhook", "function"):
        migrator.add_fields(
            table,
            previous_secret=pw.CharField(max_length=256, null=True),
            previous_secret_expires_at=pw.DateTimeField(null=True),
        )


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    for table in ("webhook", "function"):
        migrator.remove_fields(table, "previous_secret", "previous_secret_expires_at")
