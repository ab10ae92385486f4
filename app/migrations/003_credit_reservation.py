"""Credit reservation: a call holds minutes from its start to its end, and the tenant row keeps
the sum of its open calls' holds, so concurrent starts can never hold more than the balance."""

import peewee as pw
from peewee_migrate import Migrator


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.add_fields("tenant", reserved_minutes=pw.BigIntegerField(default=0))
    migrator.add_fields(
        "call",
        reserved_minutes=pw.IntegerField(default=0),
        reservation_expires_at=pw.DateTimeField(null=True, index=True),
    )


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.remove_fields("call", "reserved_minutes", "reservation_expires_at")
    migrator.remove_fields("tenant", "reserved_minutes")
