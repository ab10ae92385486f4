"""A function's timeoutMs: the budget its endpoint gets in live calls and tests (500–5000 ms).

The column's default is the database's own as well, so a row written by code from before
this migration (a host not yet updated while another already migrated) still gets 5000.
"""

import peewee as pw
from peewee_migrate import Migrator


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.add_fields(
        "function",
        timeout_ms=pw.IntegerField(default=5000, constraints=[pw.SQL("DEFAULT 5000")]),
    )


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.remove_fields("function", "timeout_ms")
