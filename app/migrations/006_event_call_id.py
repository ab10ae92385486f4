"""An event names the call it is about in a column of its own, so a call's page finds its
events through an index; the events already kept get theirs from their data's callId."""

import json
from typing import Any

import peewee as pw
from peewee_migrate import Migrator

# The event types whose data carries a callId, as they were when this migration was written.
CALL_EVENTS = ("call.started", "call.answered", "call.ended", "call.transcript", "function.called")
BATCH = 1000


def fill_call_ids(event: Any, database: pw.Database) -> None:
    """Copy each kept call event's data.callId into its call_id, a batch at a time."""
    last = ""
    while True:
        rows = list(
            event.select(event.id, event.data)
            .where(event.type.in_(CALL_EVENTS) & (event.id > last))
            .order_by(event.id)
            .limit(BATCH)
            .tuples()
        )
        if not rows:
            return
        by_call: dict[str, list[str]] = {}
        for event_id, data in rows:
            call_id = json.loads(data).get("callId") if data else None
            if isinstance(call_id, str):
                by_call.setdefault(call_id, []).append(event_id)
        with database.atomic():
            for call_id, ids in by_call.items():
                event.update(call_id=call_id).where(event.id.in_(ids)).execute()
        last = rows[-1][0]


def migrate(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.add_fields("event", call_id=pw.CharField(max_length=32, null=True))
    migrator.add_index("event", "call_id", "created_at")
    migrator.run(fill_call_ids, migrator.orm["event"], database)


def rollback(migrator: Migrator, database: pw.Database, *, fake=False):
    migrator.drop_index("event", "call_id", "created_at")
    migrator.remove_fields("event", "call_id")
