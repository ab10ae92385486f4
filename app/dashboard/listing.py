"""The dashboard's lists: filters read from the URL with the API's query schema, and pages."""

from dataclasses import dataclass, field
from typing import Any

import marshmallow as ma
from flask import request, url_for

from app.dashboard.formdata import flatten
from app.services.pages import Page

PAGE_SIZE = 50


@dataclass(frozen=True)
class Query:
    """A list's filters as typed (by their names in the URL, as in the API), what the schema
    loaded from them for the service, or its messages by filter name."""

    values: dict[str, str]
    args: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)


def read_query(schema: ma.Schema, names: tuple[str, ...]) -> Query:
    """The filters names of the URL (blank ones left out) and its offset, loaded by schema;
    a page is always PAGE_SIZE rows."""
    values = {name: request.args.get(name, "").strip() for name in names}
    given = {name: value for name, value in values.items() if value}
    offset = request.args.get("offset", "").strip()
    if offset:
        given["offset"] = offset
    try:
        args = schema.load(given)
    except ma.ValidationError as error:
        return Query(values=values, errors=flatten(error.messages))
    return Query(values=values, args={**args, "limit": PAGE_SIZE})


def page_links(
    endpoint: str, query: Query, page: Page, **path: Any
) -> tuple[str | None, str | None]:
    """The URLs of the previous and the next page, keeping the filters (None at either end);
    path: the endpoint's own values (a campaign's id, say)."""
    filters: dict[str, Any] = {
        **path,
        **{name: value for name, value in query.values.items() if value},
    }
    previous = None
    if page.offset > 0:
        offset = max(0, page.offset - page.limit)
        previous = url_for(endpoint, **(filters | {"offset": offset} if offset else filters))
    following = None
    if page.has_more:
        following = url_for(endpoint, **(filters | {"offset": page.offset + page.limit}))
    return previous, following
