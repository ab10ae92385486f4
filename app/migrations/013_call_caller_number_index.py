"""Calls searched by their caller's number (GET /calls?callerNumber=, exact or a prefix), newest
first: an index that leads with the tenant and the number."""

import peewee as pw
from peewee_migrate import Migrator


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.add_index("call", "tenant", "caller_number", "started_at", "id")


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.drop_index("call", "tenant", "caller_number", "started_at", "id")
