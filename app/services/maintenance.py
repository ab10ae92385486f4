"""Data care: consistent SQLite backups, and pruning of old delivery logs, events,
idempotency keys, dashboard sessions and the versions of agents deleted long ago."""

import sqlite3
from datetime import datetime, timedelta
from pathlib import Path
from typing import cast

from peewee import fn

from app.db import database, is_sqlite, transaction
from app.errors import ValidationFailed
from app.models import (
    Agent,
    AgentVersion,
    Call,
    Delivery,
    DeliveryAttempt,
    Event,
    FunctionDefinition,
    IdempotencyKey,
    UserSession,
)
from app.services import idempotency
from app.services import users as user_service
from app.util import utcnow


def backup_sqlite(*, target: str) -> dict[str, int]:
    """Copy the live SQLite database to target with SQLite's online backup API.

    The copy is a consistent snapshot even while the service writes; it is checked with
    PRAGMA integrity_check before this returns.
    """
    if not is_sqlite():
        raise ValidationFailed(
            "flask db backup copies SQLite databases; for PostgreSQL use pg_dump "
            "(see docs/backups.md)."
        )
    if not target:
        raise ValidationFailed("Give the backup's file name.")
    path = Path(target)
    if path.is_dir():
        raise ValidationFailed(f"{target} is a folder: give the backup's file name.")
    if path.exists():
        raise ValidationFailed(f"{target} already exists; choose a new file.")
    if not path.parent.is_dir():
        raise ValidationFailed(f"Cannot write {target}: the folder {path.parent} does not exist.")
    try:
        copy = sqlite3.connect(path)
    except sqlite3.Error as exc:  # a folder it may not write to, say
        raise ValidationFailed(f"Cannot write {target}: {exc}.") from None
    source = sqlite3.connect(database.obj.database, timeout=30)
    try:
        source.backup(copy)
        status = copy.execute("PRAGMA integrity_check").fetchone()[0]
        tables = copy.execute("SELECT count(*) FROM sqlite_master WHERE type='table'").fetchone()
    except sqlite3.Error as exc:  # the disk filled up, say
        raise ValidationFailed(f"The backup to {target} failed: {exc}.") from None
    finally:
        copy.close()
        source.close()
    if status != "ok":
        raise ValidationFailed(f"The backup failed its integrity check: {status}")
    return {"bytes": path.stat().st_size, "tables": tables[0]}


def _delete_in_batches(model, ids_query, batch_size: int) -> int:
    """Delete the rows ids_query selects, batch_size per short transaction."""
    deleted = 0
    while True:
        with transaction():
            ids = [row[0] for row in ids_query.limit(batch_size).tuples()]
            if not ids:
                return deleted
            deleted += model.delete().where(model._meta.primary_key.in_(ids)).execute()


def _unused_versions(agent_id: str):
    """The agent's versions that no call was answered with."""
    answered = Call.select(Call.id).where(
        (Call.agent == AgentVersion.agent) & (Call.agent_version == AgentVersion.version)
    )
    return AgentVersion.select(AgentVersion.version).where(
        (AgentVersion.agent == agent_id) & ~fn.EXISTS(answered)
    )


def _prune_versions(cutoff: datetime, batch_size: int) -> tuple[int, int]:
    """Delete the versions of agents deleted before cutoff that no call was answered with
    (calls are kept, and so are the versions they name), then those agents' function
    definitions that no remaining version refers to: one short transaction per batch of
    versions of an agent. The numbers of versions and definitions deleted."""
    gone = Agent.select(Agent.id).where(Agent.deleted_at < cutoff)
    agent_ids = [
        row[0]
        for row in cast(
            list[tuple[str]],
            AgentVersion.select(AgentVersion.agent)
            .where(AgentVersion.agent.in_(gone))
            .distinct()
            .tuples(),
        )
    ]
    versions = definitions = 0
    for agent_id in agent_ids:
        while True:
            with transaction():
                unused = _unused_versions(agent_id).limit(batch_size).tuples()
                numbers = [row[0] for row in cast(list[tuple[int]], unused)]
                if not numbers:
                    break
                versions += (
                    AgentVersion.delete()
                    .where((AgentVersion.agent == agent_id) & AgentVersion.version.in_(numbers))
                    .execute()
                )
        with transaction():
            kept: set[str] = set()
            digests = (
                AgentVersion.select(AgentVersion.function_digests)
                .where(AgentVersion.agent == agent_id)
                .tuples()
            )
            for row in cast(list[tuple[list[str]]], digests):
                kept.update(row[0])
            dropped = FunctionDefinition.delete().where(FunctionDefinition.agent == agent_id)
            if kept:
                dropped = dropped.where(FunctionDefinition.digest.not_in(list(kept)))
            definitions += dropped.execute()
    return versions, definitions


def prune(*, older_than_days: int, batch_size: int = 500) -> dict[str, int]:
    """Delete delivery attempts, and events with their finished deliveries, older than the
    retention, idempotency keys older than the 24 hours they hold, dashboard sessions past
    their week, and the versions of agents deleted more than the retention ago that no call
    names (with their function definitions). Calls, credits and function-call records are
    kept."""
    if older_than_days < 1:
        raise ValidationFailed("Keep at least 1 day.")
    cutoff = utcnow() - timedelta(days=older_than_days)
    attempts = _delete_in_batches(
        DeliveryAttempt,
        DeliveryAttempt.select(DeliveryAttempt.id).where(DeliveryAttempt.attempted_at < cutoff),
        batch_size,
    )
    unfinished = Delivery.select(Delivery.event).where(Delivery.status == "pending")
    old_events = Event.select(Event.id).where(
        (Event.created_at < cutoff) & Event.id.not_in(unfinished)
    )
    deliveries = _delete_in_batches(
        Delivery, Delivery.select(Delivery.id).where(Delivery.event.in_(old_events)), batch_size
    )
    events = _delete_in_batches(Event, old_events, batch_size)
    keys_cutoff = utcnow() - idempotency.KEEP_FOR
    keys = _delete_in_batches(
        IdempotencyKey,
        IdempotencyKey.select(IdempotencyKey.id).where(IdempotencyKey.created_at < keys_cutoff),
        batch_size,
    )
    sessions = _delete_in_batches(
        UserSession,
        UserSession.select(UserSession.id).where(
            UserSession.created_at < utcnow() - user_service.SESSION_MAX_AGE
        ),
        batch_size,
    )
    versions, definitions = _prune_versions(cutoff, batch_size)
    return {
        "versions": versions,
        "definitions": definitions,
        "attempts": attempts,
        "deliveries": deliveries,
        "events": events,
        "keys": keys,
        "sessions": sessions,
    }
