"""A webhook's failed attempts in a row (since its last success): how its health is shown."""

import peewee as pw
from peewee_migrate import Migrator


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.add_fields(
        "webhook",
        consecutive_failures=pw.IntegerField(default=0, constraints=[pw.SQL("DEFAULT 0")]),
    )


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.remove_fields("webhook", "consecutive_failures")
