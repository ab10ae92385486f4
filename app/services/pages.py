"""Offset pagination with a total that never scans a tenant's whole history."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import peewee as pw

from app.db import database, raw_sql

# A filtered list counts its matches up to this many rows; beyond it, total says COUNT_LIMIT.
COUNT_LIMIT = 10_000


@dataclass(frozen=True)
class Page:
    items: list[Any]
    total: int
    limit: int
    offset: int
    has_more: bool


def bounded_count(query: pw.Select | str, params: Sequence[Any] = ()) -> int:
    """Rows matching query (a peewee query, or SQL with ? placeholders), counted up to
    COUNT_LIMIT: an index range scan of at most that many rows."""
    if not isinstance(query, str):
        return query.limit(COUNT_LIMIT).count()
    # Probing for the last counted row skips index entries faster than counting them does,
    # and a count that follows a failed probe covers fewer than COUNT_LIMIT rows.
    probe = raw_sql(f"{query} LIMIT 1 OFFSET {COUNT_LIMIT - 1}")
    if database.execute_sql(probe, params).fetchone() is not None:
        return COUNT_LIMIT
    count = raw_sql(f"SELECT COUNT(*) FROM ({query}) AS matches")
    return database.execute_sql(count, params).fetchone()[0]


def paginate(query: pw.Select, *, limit: int, offset: int, total: int | None = None) -> Page:
    """One page of query (already ordered); total is bounded_count(query) unless given."""
    rows = list(query.limit(limit + 1).offset(offset))
    if total is None:
        total = bounded_count(query)
    return Page(
        items=rows[:limit], total=total, limit=limit, offset=offset, has_more=len(rows) > limit
    )
