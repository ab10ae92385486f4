"""A delivery remembers the RQ job that is to send it next, so the sweeper can ask RQ whether
that job still waits instead of enqueueing it again."""

import peewee as pw
from peewee_migrate import Migrator


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.add_fields("delivery", job_id=pw.CharField(max_length=40, null=True))


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.remove_fields("delivery", "job_id")
