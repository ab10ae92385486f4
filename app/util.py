"""Ids, clocks, timestamp formatting and camelCase names shared by every layer."""

import secrets
import string
from datetime import UTC, datetime

_ID_ALPHABET = string.ascii_lowercase + string.digits
# Random bytes map to the 36 characters; bytes from 252 (7 x 36) up are dropped, so every
# character stays equally likely. One translate() in C instead of a choice() per character.
_ID_USABLE = 7 * len(_ID_ALPHABET)
_ID_TABLE = bytes(ord(_ID_ALPHABET[byte % len(_ID_ALPHABET)]) for byte in range(256))
_ID_DROPPED = bytes(range(_ID_USABLE, 256))


def new_id(prefix: str, length: int = 20) -> str:
    """A resource id: prefix, underscore and random lowercase alphanumerics (never sequential)."""
    chars = b""
    while len(chars) < length:
        chars += secrets.token_bytes(length + 8).translate(_ID_TABLE, _ID_DROPPED)
    return prefix + "_" + chars[:length].decode()


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


def camelcase(name: str) -> str:
    """A Python name as the API spells it: system_prompt is systemPrompt, from_ is from."""
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)
