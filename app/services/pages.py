"""Offset pagination with a total that never scans a tenant's whole history."""

from dataclasses import dataclass
from typing import Any

import peewee as pw

# A filtered list counts its matches up to this many rows; beyond it, total says COUNT_LIMIT.
COUNT_LIMIT = 10_000


@dataclass(frozen=True)
class Page:
    items: list[Any]
    total: int
    limit: int
    offset: int
    has_more: bool


def bounded_count(query: "pw.ModelSelect[Any]") -> int:
    """Rows matching query, counted up to COUNT_LIMIT: an index range scan of at most that
    many rows (only the primary key is selected, so an index holding it covers the scan)."""
    return query.select(query.model._meta.primary_key).order_by().limit(COUNT_LIMIT).count()


def paginate(
    query: "pw.ModelSelect[Any]", *, limit: int, offset: int, total: int | None = None
) -> Page:
    """One page of query (already ordered); total is bounded_count(query) unless given."""
    rows = list(query.limit(limit + 1).offset(offset))
    if total is None:
        total = bounded_count(query)
    return Page(
        items=rows[:limit], total=total, limit=limit, offset=offset, has_more=len(rows) > limit
    )
