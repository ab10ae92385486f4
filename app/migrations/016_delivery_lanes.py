"""Fair delivery: the lane each webhook is sent in (the slow lane after a timeout), the lane a
delivery in flight was sent to, and the indexes the dispatcher reads in-flight counts and a
tenant's next deliveries by."""

import peewee as pw
from peewee_migrate import Migrator


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.add_fields(
        "webhook",
        lane=pw.CharField(
            max_length=16, default="webhooks", constraints=[pw.SQL("DEFAULT 'webhooks'")]
        ),
    )
    migrator.add_fields("delivery", lane=pw.CharField(max_length=16, null=True))
    migrator.add_index("delivery", "status", "lease_until")
    migrator.add_index("delivery", "tenant", "status", "next_attempt_at")


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.drop_index("delivery", "tenant", "status", "next_attempt_at")
    migrator.drop_index("delivery", "status", "lease_until")
    migrator.remove_fields("delivery", "lane")
    migrator.remove_fields("webhook", "lane")
