"""Custom marshmallow fields of the API: timestamps, strict types, receiver URLs, shown text."""

import re
from datetime import UTC, date, datetime
from typing import Any

from marshmallow import ValidationError, fields, validate

from app.util import isoformat


class Timestamp(fields.DateTime):
    """ISO 8601 UTC with milliseconds and Z, e.g. 2026-11-21T09:15:02.120Z."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("metadata", {}).setdefault(
            "description",
            "ISO 8601 UTC timestamp with milliseconds, e.g. 2026-11-21T09:15:02.120Z.",
        )
        super().__init__(**kwargs)

    def _serialize(self, value: Any, attr: Any, obj: Any, **kwargs: Any) -> str | None:
        return isoformat(value)


class UtcDateTime(fields.AwareDateTime):
    """An ISO 8601 timestamp in a request, UTC when it has no offset, loaded as naive UTC."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(default_timezone=UTC, **kwargs)

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> datetime:
        moment = super()._deserialize(value, attr, data, **kwargs)
        try:
            return moment.astimezone(UTC).replace(tzinfo=None)
        except OverflowError:  # 0001-01-01T00:00:00+05:00 is before the first UTC moment
            raise self.make_error("invalid", input=value, obj_type=self.OBJ_TYPE) from None


class StrictBoolean(fields.Boolean):
    """Only JSON true and false (no "yes", 1 or "true")."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> bool:
        if not isinstance(value, bool):
            raise self.make_error("invalid")
        return value


def StrictInteger(**kwargs: Any) -> fields.Integer:  # noqa: N802 - reads like a field class
    """An integer that must be a JSON integer (no "10", no 10.5)."""
    return fields.Integer(strict=True, **kwargs)


# The largest integer a request may carry where a 32-bit database column stores it.
MAX_INT32 = 2**31 - 1

# The receiver URLs the OpenAPI document promises to accept: ASCII, a host and an optional
# port, path and query. The host neither starts with * nor has a % other than a
# percent-escape of a character that is not a control character (%00-%1F, %7F): requests and
# urllib3, which the sender prepares URLs with, refuse those.
# app.outbound.policy.check_url is the full rule (https only, and no private host, unless
# ALLOW_PRIVATE_URLS is set).
HOST_CHAR = r"([A-Za-z0-9._~!$&'()+,;=-]|%([2-6][0-9A-Fa-f]|7[0-9A-Ea-e]|[89A-Fa-f][0-9A-Fa-f]))"
URL_PATTERN = rf"^https?://{HOST_CHAR}({HOST_CHAR}|\*)*(:[0-9]{{1,4}})?([/?#][!-~]*)?$"


def ReceiverUrl(description: str, **kwargs: Any) -> fields.String:  # noqa: N802
    """A URL the service will call (webhook url, function endpoint)."""
    return fields.String(
        validate=validate.Length(1, 2048),
        metadata={
            "description": description + " http:// and private hosts only where the server "
            "allows them (development).",
            "pattern": URL_PATTERN,
        },
        **kwargs,
    )


def unique_items(values: list[Any]) -> None:
    if len(set(values)) != len(values):
        raise ValidationError("Items must be unique.")


# Characters a terminal or a text view acts on instead of showing them: the C0 controls but
# tab and line feed (a carriage return only before a line feed, as in CRLF), DEL, the C1
# controls, and the bidirectional embeddings, overrides and isolates (U+202A-U+202E,
# U+2066-U+2069), which reorder the text shown around them. Escapes that JSON Schema's
# (ECMA-262) regular expressions and Python's read alike.
CONTROLS = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
CONTROL_CHARACTERS = re.compile(rf"[{CONTROLS}]|\r(?!\n)")
TEXT_PATTERN = rf"^([^{CONTROLS}\r]|\r\n)*$"


class Text(fields.String):
    """Text people read (in the dashboard, a terminal, a log viewer), lines and tabs
    included: a control character or a bidirectional override is 422 naming the field."""

    default_error_messages = {
        "control": "Must not contain control characters or bidirectional overrides (found "
        "U+{code:04X} at character {position}); tabs and line breaks are fine."
    }

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("metadata", {})["pattern"] = TEXT_PATTERN
        super().__init__(**kwargs)

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs)
        found = CONTROL_CHARACTERS.search(text)
        if found:
            raise self.make_error("control", code=ord(found.group()[0]), position=found.start())
        return text


class DateOrTimestamp(fields.String):
    """An ISO 8601 date (00:00Z of that day) or timestamp (UTC when it has no offset)."""

    default_error_messages = {"invalid": "Not an ISO 8601 date or timestamp."}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("metadata", {})["anyOf"] = [
            {"type": "string", "format": "date"},
            {"type": "string", "format": "date-time"},
        ]
        super().__init__(**kwargs)

    def _deserialize(  # type: ignore[override]  # a String on the wire, a datetime loaded
        self, value: Any, attr: Any, data: Any, **kwargs: Any
    ) -> datetime:
        text = super()._deserialize(value, attr, data, **kwargs).strip().upper()
        try:
            if "T" not in text and " " not in text:
                day = date.fromisoformat(text)
                return datetime(day.year, day.month, day.day)
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise self.make_error("invalid") from None
        if moment.tzinfo is not None:
            moment = moment.astimezone(UTC).replace(tzinfo=None)
        return moment


class PhoneNumberQuery(fields.String):
    """A phone number to search for in international format, or the start of one followed by
    *: loaded with its leading + (which an unencoded query string turns into a space)."""

    PATTERN = r"^\+?[0-9]{1,15}\*?$"
    default_error_messages = {
        "invalid_number": "A number in international format (+6281234567890), or its first "
        "digits followed by * (+62812*)."
    }

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("metadata", {})["pattern"] = self.PATTERN
        super().__init__(**kwargs)

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs).strip()
        if not re.match(self.PATTERN, text):
            raise self.make_error("invalid_number")
        return text if text.startswith("+") else "+" + text
