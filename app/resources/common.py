"""Pieces shared by the HTTP layer: blueprints with their auth hook, fields, list wrappers."""

from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from types import NoneType
from typing import Any, Literal

import marshmallow as ma
import peewee
from flask import request
from flask_smorest import Blueprint
from marshmallow.decorators import POST_DUMP, PRE_DUMP

from app import db
from app.auth import require_api_key, require_runtime_token
from app.db import Rows
from app.errors import AppError
from app.resources.guards import ArgumentsParser, refuse_nul_characters
from app.services.pages import COUNT_LIMIT
from app.util import isoformat

BODY_METHODS = ("POST", "PUT", "PATCH")


class UnsupportedMediaType(AppError):
    status, code = 415, "unsupported_media_type"


def require_json_body() -> None:
    """A request that carries a body must say it is JSON (415 otherwise)."""
    if request.method not in BODY_METHODS:
        return
    has_body = (
        bool(request.content_length)
        or "chunked" in request.headers.get("Transfer-Encoding", "").lower()
    )
    if has_body and not request.is_json:
        raise UnsupportedMediaType(
            "The request body must be JSON: send Content-Type: application/json."
        )


RATE_LIMIT_HEADERS = {
    "X-RateLimit-Limit": "Requests allowed per minute for your tenant (all keys together).",
    "X-RateLimit-Remaining": "Requests left in the current one-minute window.",
    "X-RateLimit-Reset": "Unix time (seconds) at which the current window ends.",
}

# The answers to a request body before its view reads it: bad JSON (webargs), over
# MAX_CONTENT_LENGTH (werkzeug), not JSON (require_json_body). flask-smorest documents 422.
BODY_ERRORS = (
    (400, "BAD_REQUEST"),
    (413, "REQUEST_ENTITY_TOO_LARGE"),
    (415, "UNSUPPORTED_MEDIA_TYPE"),
)


class GuardedBlueprint(Blueprint):
    """A blueprint whose requests pass the input guards: JSON bodies only, bounded, no NUL.

    The answers of those guards and of the authentication hook are documented on every
    operation by a doc callback (flask-smorest's hook for a blueprint's own documentation);
    a view documents its own errors with alt_response (404 for an id in its path).
    """

    ARGUMENTS_PARSER = ArgumentsParser()
    SECURITY_SCHEME: str
    # The errors the hooks around every view may answer: (status, response component).
    GUARD_ERRORS: tuple[tuple[int, str], ...] = ((401, "UNAUTHORIZED"),)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.before_request(require_json_body)
        self.before_request(refuse_nul_characters)
        self._prepare_doc_cbks.append(self._prepare_guard_doc)

    def _prepare_guard_doc(
        self, doc: dict[str, Any], doc_info: dict[str, Any], *, method: str, **kwargs: Any
    ) -> dict[str, Any]:
        """Document the security scheme and the errors the hooks around the view answer."""
        doc["security"] = [{self.SECURITY_SCHEME: []}]
        errors = list(self.GUARD_ERRORS)
        if method.upper() in BODY_METHODS:
            # Any body sent must be JSON (require_json_body), even where none is read.
            errors.extend(BODY_ERRORS if "requestBody" in doc else BODY_ERRORS[-1:])
        responses = doc.setdefault("responses", {})
        documented = {str(status) for status in responses}
        for status, name in errors:
            if str(status) not in documented:
                responses[status] = name
        return doc


class TenantBlueprint(GuardedBlueprint):
    """A blueprint of the tenant API (/api/v1): every request needs an API key.

    The key is checked by app.auth.authenticate_request, an app-level hook that runs before
    the rate limiter, so the limiter can count per tenant and bad keys count for nobody.
    """

    authenticate = staticmethod(require_api_key)
    rate_limited = True
    SECURITY_SCHEME = "ApiKeyAuth"
    GUARD_ERRORS = ((401, "UNAUTHORIZED"), (429, "RATE_LIMITED"))

    def _prepare_guard_doc(
        self, doc: dict[str, Any], doc_info: dict[str, Any], **kwargs: Any
    ) -> dict[str, Any]:
        """Also the rate-limit headers every answer of a view carries."""
        doc = super()._prepare_guard_doc(doc, doc_info, **kwargs)
        for response in doc["responses"].values():
            if isinstance(response, dict):  # not a reference to a shared error response
                response["headers"] = {
                    name: {"$ref": f"#/components/headers/{name}"} for name in RATE_LIMIT_HEADERS
                }
        return doc


class RuntimeBlueprint(GuardedBlueprint):
    """A blueprint of the runtime API (/internal/v1): every request needs the runtime token."""

    authenticate = staticmethod(require_runtime_token)
    SECURITY_SCHEME = "RuntimeToken"
    GUARD_ERRORS = ((401, "UNAUTHORIZED"), (503, "SERVICE_UNAVAILABLE"))


class Timestamp(ma.fields.DateTime):
    """ISO 8601 UTC with milliseconds and Z, e.g. 2026-11-21T09:15:02.120Z."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("metadata", {}).setdefault(
            "description",
            "ISO 8601 UTC timestamp with milliseconds, e.g. 2026-11-21T09:15:02.120Z.",
        )
        super().__init__(**kwargs)

    def _serialize(self, value: Any, attr: Any, obj: Any, **kwargs: Any) -> str | None:
        return isoformat(value)


class UtcDateTime(ma.fields.AwareDateTime):
    """An ISO 8601 timestamp in a request, UTC when it has no offset, loaded as naive UTC."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(default_timezone=UTC, **kwargs)

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> datetime:
        moment = super()._deserialize(value, attr, data, **kwargs)
        return moment.astimezone(UTC).replace(tzinfo=None)


class StrictBoolean(ma.fields.Boolean):
    """Only JSON true and false (no "yes", 1 or "true")."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> bool:
        if not isinstance(value, bool):
            raise self.make_error("invalid")
        return value


def StrictInteger(**kwargs: Any) -> ma.fields.Integer:  # noqa: N802 - reads like a field class
    """An integer that must be a JSON integer (no "10", no 10.5)."""
    return ma.fields.Integer(strict=True, **kwargs)


# The largest integer a request may carry where a 32-bit database column stores it.
MAX_INT32 = 2**31 - 1

# The receiver URLs the OpenAPI document promises to accept: ASCII, a host and an optional
# port, path and query. app.outbound.check_url is the full rule (https only, and no private
# host, unless ALLOW_PRIVATE_URLS is set).
URL_PATTERN = r"^https?://[A-Za-z0-9._~%!$&'()*+,;=-]+(:[0-9]{1,4})?([/?#][!-~]*)?$"


def ReceiverUrl(description: str, **kwargs: Any) -> ma.fields.String:  # noqa: N802
    """A URL the service will call (webhook url, function endpoint)."""
    return ma.fields.String(
        validate=ma.validate.Length(1, 2048),
        metadata={
            "description": description + " http:// and private hosts only where the server "
            "allows them (development).",
            "pattern": URL_PATTERN,
        },
        **kwargs,
    )


def unique_items(values: list[Any]) -> None:
    if len(set(values)) != len(values):
        raise ma.ValidationError("Items must be unique.")


class Schema(ma.Schema):
    """Base of every schema: unknown fields in a body are an error, so typos surface.

    Dumping takes a shorter path than marshmallow's: the fields to read are worked out once
    per schema instance, each value is read with one getattr (or, from a mapping, by key as
    marshmallow does), values a field would dump unchanged (a str for a String, None for most
    fields) are copied as they are, and a list of nested objects is dumped by the nested
    schema in one call. marshmallow's own accessor chain cost as much CPU as the rest of a
    list request. Dotted attributes, computed fields and schemas with their own get_attribute
    keep marshmallow's path (and nested schemas with dump hooks their dump()),
    so every output is the same.

    Database rows (db.Rows, what list endpoints read) are dumped from their tuples: one
    function per column from the database value to the output, and times rewritten from
    SQLite's text without building a datetime. Turning 50 calls into objects and dumping
    those cost a page of calls more CPU than its SQL.
    """

    class Meta:
        unknown = ma.RAISE

    def _serialize(self, obj: Any, *, many: bool = False) -> Any:
        plan = self._plan()
        if plan is False:
            return super()._serialize(obj, many=many)
        if many and type(obj) is Rows:
            return self._dump_rows(obj)
        if many and obj is not None:
            dump_one = self._dump_one
            return [dump_one(plan, item) for item in obj]
        return self._dump_one(plan, obj)

    def _dump_one(self, plan: list[tuple[Any, ...]], obj: Any) -> Any:
        read = _read_key if hasattr(obj, "__getitem__") else getattr
        out = self.dict_class()
        missing = ma.missing
        for key, attr_name, attribute, field, unchanged, convert in plan:
            if attribute is None:  # a field marshmallow has to read itself
                value = field.serialize(attr_name, obj, accessor=self.get_attribute)
                if value is not missing:
                    out[key] = value
                continue
            value = read(obj, attribute, missing)
            if type(value) in unchanged:
                out[key] = value
                continue
            if value is missing:
                default = field.dump_default
                value = default() if callable(default) else default
                if value is missing:
                    continue
            out[key] = convert(value, attr_name, obj)
        return out

    def _dump_rows(self, rows: Rows) -> list[Any]:
        """Dump database rows straight from their tuples (see _make_row_dumper)."""
        dumpers = self.__dict__.setdefault("_row_dumpers", {})
        key = (rows.model, rows.columns)
        dump_row = dumpers.get(key)
        if dump_row is None:
            dump_row = dumpers[key] = self._make_row_dumper(rows.model, rows.columns)
        if dump_row is False:
            return [self._serialize(item) for item in rows]
        return [dump_row(row) for row in rows.tuples]

    def _make_row_dumper(
        self, model: type[Any], names: tuple[str, ...]
    ) -> Callable[[Any], dict[str, Any]] | Literal[False]:
        """What dumps one row of these columns of model; False when a field reads anything
        but a column (then rows are dumped as objects).

        Per field, the column's value as it is when its type is one the field dumps
        unchanged, else one function from database value to output. The function is written
        out for these columns (a dict display reading the row by index): looping over the
        fields for each row cost half as much again.
        """
        plan = self._plan()
        model_fields = model._meta.columns
        if plan is False or any(entry[2] not in names for entry in plan):
            return False
        namespace: dict[str, Any] = {}
        items = []
        for n, (key, attr_name, attribute, field, unchanged, convert) in enumerate(plan):
            model_field = model_fields.get(attribute)
            if model_field is None:
                return False
            if isinstance(field, Timestamp) and isinstance(model_field, peewee.DateTimeField):
                unchanged, convert = frozenset((NoneType,)), db.timestamp_text(model_field)
            elif (to_python := db.column_converter(model_field)) is None:
                convert = partial(_dump_value, convert, attr_name)
            else:
                convert = partial(_dump_column, to_python, unchanged, convert, attr_name)
                unchanged = unchanged & {NoneType}
            namespace[f"unchanged{n}"], namespace[f"convert{n}"] = unchanged, convert
            index = names.index(attribute)
            items.append(
                f"{key!r}: value if type(value := row[{index}]) in unchanged{n} "
                f"else convert{n}(value),"
            )
        source = "def dump_row(row):\n    return {\n" + "\n".join(items) + "\n}\n"
        exec(compile(source, f"<{type(self).__name__} row dumper>", "exec"), namespace)
        return namespace["dump_row"]

    def _plan(self) -> list[tuple[Any, ...]] | Literal[False]:
        """The dump plan (see _make_dump_plan), worked out once per schema instance."""
        plan = self.__dict__.get("_dump_plan")
        if plan is None:
            plan = self._dump_plan = self._make_dump_plan()
        return plan

    def _make_dump_plan(self) -> list[tuple[Any, ...]] | Literal[False]:
        """Per dumped field: output key, field name, attribute to read (None: let marshmallow
        read it), the field, the value types it dumps unchanged, and what dumps the others."""
        if type(self).get_attribute is not ma.Schema.get_attribute:
            return False
        plan = []
        for attr_name, field in self.dump_fields.items():
            attribute = field.attribute or attr_name
            direct = field._CHECK_ATTRIBUTE and "." not in attribute
            key = field.data_key if field.data_key is not None else attr_name
            plan.append(
                (
                    key,
                    attr_name,
                    attribute if direct else None,
                    field,
                    _unchanged_types(field),
                    _nested_list_dumper(field) or field._serialize,
                )
            )
        return plan


def _dump_value(convert: Callable[..., Any], attr_name: str, value: Any) -> Any:
    """A field's output for a value it does not dump unchanged (no row object to give)."""
    return convert(value, attr_name, None)


def _dump_column(
    to_python: Callable[[Any], Any],
    unchanged: frozenset[type],
    convert: Callable[..., Any],
    attr_name: str,
    value: Any,
) -> Any:
    """A field's output for a database value its model field converts first (not None)."""
    if value is not None:
        value = to_python(value)
        if type(value) in unchanged:
            return value
    return convert(value, attr_name, None)


def _read_key(obj: Any, key: str, default: Any) -> Any:
    """A value of a mapping (or anything with __getitem__) as marshmallow reads it: by key,
    else by attribute."""
    try:
        return obj[key]
    except (KeyError, IndexError, TypeError, AttributeError):
        return getattr(obj, key, default)


def _unchanged_types(field: ma.fields.Field) -> frozenset[type]:
    """The value types the field dumps as they are: the plain type of a plain field, and None
    for the fields whose _serialize gives None for None (marshmallow's, Timestamp)."""
    kind = type(field)
    if kind is ma.fields.String:
        return frozenset((str, NoneType))
    if type(field) is ma.fields.Integer and not field.as_string:
        return frozenset((int, NoneType))
    if kind is ma.fields.Boolean:
        return frozenset((bool, NoneType))
    if type(field) is ma.fields.Dict and field.key_field is None and field.value_field is None:
        return frozenset((dict, NoneType))  # it would dump a copy of the dict
    if kind is Timestamp or (kind.__module__ == "marshmallow.fields" and kind not in _NOT_NONE):
        return frozenset((NoneType,))
    return frozenset()


# marshmallow's fields that do not dump None as None: they ignore the value.
_NOT_NONE = (ma.fields.Method, ma.fields.Function, ma.fields.Constant)


def _nested_list_dumper(field: ma.fields.Field) -> Any:
    """For List(Nested(S)) with S one of these schemas without dump hooks: dump the list with
    one call to S (what marshmallow does item by item through Nested and S.dump)."""
    if type(field) is not ma.fields.List or type(field.inner) is not ma.fields.Nested:
        return None
    nested = field.inner
    schema = nested.schema
    if not isinstance(schema, Schema) or schema.many or nested.many:
        return None
    if schema._hooks[PRE_DUMP] or schema._hooks[POST_DUMP]:
        return None

    def dump_list(value: Any, attr: Any, obj: Any) -> list[Any]:
        if type(value) is Rows:
            return schema._dump_rows(value)
        return [None if item is None else schema._serialize(item) for item in value]

    return dump_list


class PageArgsSchema(Schema):
    """Query parameters of a paginated list."""

    limit = ma.fields.Integer(
        load_default=50,
        validate=ma.validate.Range(1, 100),
        metadata={"description": "Page size, 1–100 (default 50)."},
    )
    offset = ma.fields.Integer(
        load_default=0,
        validate=ma.validate.Range(0, MAX_INT32),
        metadata={"description": f"Rows to skip (default 0, at most {MAX_INT32:,})."},
    )


class PaginationSchema(Schema):
    total = ma.fields.Integer(
        required=True,
        metadata={
            "description": "Matching records. Exact for an unfiltered list; a filtered or "
            f"ledger count stops at {COUNT_LIMIT:,}, so {COUNT_LIMIT:,} means at least that."
        },
    )
    limit = ma.fields.Integer(required=True, metadata={"description": "The page size used."})
    offset = ma.fields.Integer(required=True, metadata={"description": "The offset used."})
    has_more = ma.fields.Boolean(
        data_key="hasMore",
        required=True,
        metadata={"description": "Whether records exist after this page (always exact)."},
    )
