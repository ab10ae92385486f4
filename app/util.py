"""Ids, clocks and timestamp formatting shared by every layer."""

import secrets
import string
from datetime import UTC, datetime

_ID_ALPHABET = string.ascii_lowercase + string.digits


def new_id(prefix: str, length: int = 20) -> str:
    """A resource id: prefix, underscore and random lowercase alphanumerics (never sequential)."""
    return prefix + "_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(length))


def utcnow() -> datetime:
    """The current time as a naive UTC datetime (the form stored in the database)."""
    return datetime.now(UTC).replace(tzinfo=None)


def isoformat(value: datetime | None) -> str | None:
    """ISO 8601 UTC with millisecond precision and a trailing Z."""
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(timespec="milliseconds") + "Z"  # the year always has 4 digits
