"""Each event gets its place in its tenant's log (seq: 1, 2, 3, … in commit order), and the
tenant row the counter new events take theirs from; the events already kept are numbered
in the order they happened (created_at, then id). A webhook's deliveries get an index by
status, which counts its pending ones (a replay's limit) and serves its log's status filter.

Both columns are added NOT NULL with a DEFAULT, which SQLite adds in place: making a column
NOT NULL afterwards would rebuild the table, and dropping the old table would delete, through
its foreign keys, every row that refers to it (the migration runs in a transaction, where
SQLite cannot turn foreign keys off).
"""

import peewee as pw
from peewee_migrate import Migrator


def number_events(event, tenant) -> None:
    """Number each tenant's kept events 1, 2, 3, … oldest first, and set its counter to the
    last number: two statements, whatever the number of events."""
    ranked = event.select(
        event.id,
        pw.fn.ROW_NUMBER()
        .over(partition_by=[event.tenant], order_by=[event.created_at, event.id])
        .alias("n"),
    ).alias("ranked")
    event.update(seq=ranked.c.n).from_(ranked).where(event.id == ranked.c.id).execute()
    last = event.select(pw.fn.COALESCE(pw.fn.MAX(event.seq), 0)).where(event.tenant == tenant.id)
    tenant.update(event_seq=last).execute()


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    default_zero: list[pw.Node] = [pw.SQL("DEFAULT 0")]
    migrator.add_fields(
        "tenant",
        allow_not_null=True,
        event_seq=pw.BigIntegerField(default=0, constraints=default_zero),
    )
    migrator.add_fields(
        "event", allow_not_null=True, seq=pw.BigIntegerField(default=0, constraints=default_zero)
    )
    migrator.run(number_events, migrator.orm["event"], migrator.orm["tenant"])
    migrator.add_index("event", "tenant", "seq", unique=True)
    migrator.add_index("delivery", "webhook", "status", "created_at")


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.drop_index("delivery", "webhook", "status", "created_at")
    migrator.drop_index("event", "tenant", "seq")
    migrator.remove_fields("event", "seq")
    migrator.remove_fields("tenant", "event_seq")
