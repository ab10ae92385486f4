"""How the dashboard's pages show times, durations, JSON and links to pages that may not exist."""

import json
from datetime import UTC, datetime
from typing import Any

from flask import current_app, url_for

from app.dashboard import bp
from app.services.pages import COUNT_LIMIT, Page


@bp.app_template_filter("utc")
def utc(value: datetime | None, empty: str = "") -> str:
    """A stored (naive UTC) time as 2026-11-21 09:15:02; empty (a text) for None."""
    return empty if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


@bp.app_template_filter("iso_utc")
def iso_utc(value: str | None) -> str:
    """An API timestamp (2026-11-21T09:15:02.120Z) as the pages show times: 2026-11-21
    09:15:02; empty for None, and as it is when it is not one."""
    if not value:
        return ""
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    return parsed.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


@bp.app_template_filter("seconds")
def seconds(value: int | None) -> str:
    """A number of seconds as minutes and seconds, 1:35; an empty string for None."""
    if value is None:
        return ""
    minutes, rest = divmod(value, 60)
    return f"{minutes}:{rest:02d}"


@bp.app_template_filter("as_json")
def as_json(value: Any) -> str:
    """A JSON value as compact text, characters as they are (the template escapes them)."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


@bp.app_template_filter("shown")
def shown(value: Any) -> str:
    """A stored value (an audit entry's detail, say) as a person reads it: a dash for nothing,
    yes or no, a list's items separated by commas, an object as JSON; never Python's None."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(shown(item) for item in value) or "—"
    if isinstance(value, dict):
        return as_json(value)
    return str(value)


@bp.app_template_filter("as_json_block")
def as_json_block(value: Any) -> str:
    """A JSON value as indented text, for a <pre> (the template escapes it)."""
    return json.dumps(value, ensure_ascii=False, indent=2)


@bp.app_template_filter("total")
def total(page: Page) -> str:
    """A list's total as words: a bounded count at its limit means at least that many."""
    if page.total >= COUNT_LIMIT:
        return f"{COUNT_LIMIT:,} or more"
    return f"{page.total:,}"


@bp.app_template_global()
def page_url(endpoint: str, **values: Any) -> str | None:
    """The URL of a page built elsewhere in the dashboard, or None while it does not exist."""
    if endpoint not in current_app.view_functions:
        return None
    return url_for(endpoint, **values)
