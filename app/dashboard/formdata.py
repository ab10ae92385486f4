"""HTML form data loaded through the API's marshmallow schemas, and records shown in forms.

A form names its inputs with the API's JSON keys (systemPrompt, maxCallDurationMinutes, …), so
the schema's per-field messages land next to the inputs. Forms send text only; the schema's
field types say how each value becomes the JSON value the API would have received:

- an integer: its digits as a number (anything else is passed on for the schema to refuse);
- a boolean: a checkbox followed by a hidden "false" input, so the first value is "true"
  when ticked and "false" when not; an input left out keeps its value, as in a PATCH;
- a list: every value given, each split at commas and white space (checkboxes, or names
  typed in one input);
- a nested object: JSON text (a textarea);
- a string: as typed, with the browser's CRLF line ends made LF; empty is null where the
  field takes null.

Every field is checked at once and all their messages are shown together, in plain words
(PLAIN rewords marshmallow's own), never one problem after another is fixed.
"""

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from marshmallow import Schema, ValidationError, fields
from werkzeug.datastructures import MultiDict

from app.errors import AppError
from app.resources.guards import NUL, NUL_MESSAGE, TOO_DEEP, check_json_body
from app.services import urls

Errors = dict[str, list[str]]

# marshmallow's own messages, in the words a person reads: the one place they are reworded
# (the schemas' own messages are written that way already).
PLAIN = tuple(
    (re.compile(pattern), words)
    for pattern, words in (
        (r"^(Missing data for required field|Field may not be null)\.$", "Fill this in."),
        (r"^Not a valid integer\.$", "Enter a whole number."),
        (r"^Not a valid number\.$", "Enter a number."),
        (r"^Not a valid boolean\.$", "Choose yes or no."),
        (r"^Not a valid string\.$", "Enter text."),
        (r"^Not a valid (aware |naive )?datetime\.$", "Enter a time as YYYY-MM-DD HH:MM, in UTC."),
        (r"^Not a valid date\.$", "Enter a date as YYYY-MM-DD."),
        (r"^Not a valid list\.$", "Choose from the list."),
        (r"^Not a valid mapping type\.$", "Enter a JSON object, in braces: {…}."),
        (r"^Length must be between (\d+) and (\d+)\.$", r"Use \1 to \2 characters."),
        (r"^Shorter than minimum length (\d+)\.$", r"Use at least \1 characters."),
        (r"^Longer than maximum length (\d+)\.$", r"Use at most \1 characters."),
        (
            r"^Must be greater than or equal to (\S+) and less than or equal to (\S+)\.$",
            r"Enter a number from \1 to \2.",
        ),
        (r"^Must be greater than or equal to (\S+)\.$", r"Enter \1 or more."),
        (r"^Must be less than or equal to (\S+)\.$", r"Enter \1 or less."),
        (r"^Must be one of: (.*)\.$", r"Choose one of \1."),
        (r"^String does not match expected pattern\.$", "This is not in the form asked for."),
        (r"^Unknown field\.$", "This is not a field of the form."),
        (r"^(Invalid value|Invalid input)\.$", "This value is not allowed."),
        (r"^Invalid type\.$", "This value is not of the kind asked for."),
        (r"^Length must be (\d+)\.$", r"Use exactly \1 characters."),
        (r"^Number too large\.$", "Enter a smaller number."),
        (r"^Special numeric values \(nan or infinity\) are not permitted\.$", "Enter a number."),
        (r"^Not a valid URL\.$", "Enter a web address (https://…)."),
        (r"^Not a valid email address\.$", "Enter an email address."),
    )
)


def plain(message: str) -> str:
    """A validation message in plain words: marshmallow's reworded (PLAIN), others as they are."""
    for pattern, words in PLAIN:
        if pattern.match(message):
            return pattern.sub(words, message)
    return message


INTEGER = re.compile(r"^[+-]?\d{1,12}$")
TRUE, FALSE = ("true", "on", "1"), ("false", "off", "0", "")


def load_form(
    schema: Schema, form: MultiDict, *, urls_at: tuple[str, ...] = ()
) -> tuple[dict[str, Any], Errors]:
    """The schema's load of the form (attribute names to values), and the messages per input
    (JSON key to messages; "_schema" for the form as a whole) when it is invalid: every
    field's at once. urls_at: the keys of URLs the service will call; when another field is
    wrong, their rules are checked too (else the service checks them when it saves)."""
    data: dict[str, Any] = {}
    errors: Errors = {}
    for field in schema.load_fields.values():
        key = field.data_key or field.name
        if key is None:
            continue
        values = form.getlist(key)
        if not values:
            continue
        if any(NUL in value for value in values):
            errors[key] = [NUL_MESSAGE]
            continue
        try:
            data[key] = _json_value(field, values)
        except ValueError as exc:
            errors[key] = [str(exc)]
    unreadable = set(errors)  # the schema would only say these are missing
    try:
        loaded = schema.load(data)
    except ValidationError as exc:
        for key, messages in flatten(exc.messages).items():
            if key not in unreadable:
                errors.setdefault(key, []).extend(messages)
    else:
        if not errors:
            return loaded, {}
    for key in urls_at:
        if isinstance(data.get(key), str) and key not in errors:
            errors.update(urls.problems(data[key], field=key))
    return {}, errors


def _json_value(field: fields.Field, values: list[str]) -> Any:
    first = values[0].replace("\r\n", "\n")
    if isinstance(field, fields.Boolean):
        lowered = first.strip().lower()
        return True if lowered in TRUE else False if lowered in FALSE else first
    if isinstance(field, fields.Integer):
        text = first.strip()
        return int(text) if INTEGER.match(text) else text
    if isinstance(field, fields.List):
        return [item for value in values for item in re.split(r"[,\s]+", value) if item]
    if isinstance(field, fields.Nested | fields.Dict):
        try:
            value = json.loads(first)
            # The API's guards: bounded nesting, no unpaired surrogate.
            check_json_body(value, first.encode("utf-8", "surrogatepass"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"Not valid JSON (line {exc.lineno}, column {exc.colno}).") from None
        except RecursionError:  # json's decoder recurses once per level of nesting
            raise ValueError(TOO_DEEP) from None
        except AppError as exc:
            raise ValueError(exc.message) from None
        return value
    if first == "" and field.allow_none:
        return None
    return first


def flatten(messages: Any) -> Errors:
    """marshmallow's nested messages as one list per top-level key; a nested message names
    where it applies ("properties.city.type: Must be one of …")."""
    if not isinstance(messages, Mapping):
        return {"_schema": list(_lines(messages, []))}
    return {str(key): list(_lines(value, [])) for key, value in messages.items()}


def _lines(messages: Any, path: list[str]) -> Iterator[str]:
    if isinstance(messages, Mapping):
        for key, value in messages.items():
            # A dict field nests each entry's messages under "value" (and "key").
            skip = key in ("value", "_schema")
            yield from _lines(value, path if skip else [*path, str(key)])
        return
    for message in _as_list(messages):
        yield f"{'.'.join(path)}: {plain(str(message))}" if path else plain(str(message))


def _as_list(messages: Any) -> list[Any]:
    return list(messages) if isinstance(messages, list | tuple) else [messages]


def as_form(record: Mapping[str, Any]) -> MultiDict:
    """A record as the API returns it (a schema's dump), as the values a form would send."""
    values: MultiDict = MultiDict()
    for key, value in record.items():
        if isinstance(value, list):
            values.setlist(key, [str(item) for item in value])
        elif isinstance(value, bool):
            values[key] = "true" if value else "false"
        elif isinstance(value, dict):
            values[key] = json.dumps(value, indent=2, ensure_ascii=False)
        elif value is None:
            values[key] = ""
        else:
            values[key] = str(value)
    return values


def changed(record: Any, loaded: Mapping[str, Any]) -> dict[str, Any]:
    """The loaded values that differ from the record's: what an edit form changes."""
    return {name: value for name, value in loaded.items() if getattr(record, name) != value}
