"""Offset pagination with a total that never scans a tenant's whole history."""

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import peewee as pw

from app.db import database, raw_sql

# A filtered list counts its matches up to this many rows; beyond it, total says COUNT_LIMIT.
COUNT_LIMIT = 10_000
# How long a process remembers that a growing-only match set reached COUNT_LIMIT, and for how
# many such sets at most (beyond that, it forgets them all and starts over).
REMEMBER_CAPPED_S = 60.0
REMEMBER_CAPPED_MAX = 10_000
_capped: dict[tuple[str, tuple[Any, ...]], float] = {}  # (query, params) -> when it reached it


@dataclass(frozen=True)
class Page:
    items: list[Any]
    total: int
    limit: int
    offset: int
    has_more: bool


def bounded_count(
    query: pw.Select | str, params: Sequence[Any] = (), *, only_grows: bool = False
) -> int:
    """Rows matching query (a peewee query, or SQL with ? placeholders), counted up to
    COUNT_LIMIT: an index range scan of at most that many rows.

    only_grows: rows never stop matching (the filter is on values that never change), so once
    the count reached COUNT_LIMIT this process answers COUNT_LIMIT for REMEMBER_CAPPED_S
    without scanning again; at millions of rows that scan was most of the request.
    """
    if not isinstance(query, str):
        return query.limit(COUNT_LIMIT).count()
    key = (query, tuple(params))
    reached = _capped.get(key) if only_grows else None
    if reached is not None and time.monotonic() - reached < REMEMBER_CAPPED_S:
        return COUNT_LIMIT
    # Probing for the last counted row skips index entries faster than counting them does,
    # and a count that follows a failed probe covers fewer than COUNT_LIMIT rows.
    probe = raw_sql(f"{query} LIMIT 1 OFFSET {COUNT_LIMIT - 1}")
    if database.execute_sql(probe, params).fetchone() is not None:
        if only_grows:
            if len(_capped) >= REMEMBER_CAPPED_MAX:
                _capped.clear()
            _capped[key] = time.monotonic()
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
