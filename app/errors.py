"""Domain errors and the one handler that turns every error into the documented error body."""

import logging
from http import HTTPStatus
from typing import Any

import marshmallow as ma
import peewee as pw
from flask import Flask, g, jsonify
from werkzeug.exceptions import HTTPException

from app.util import new_id

log = logging.getLogger(__name__)

CODES_BY_STATUS = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    414: "uri_too_long",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "rate_limited",
    431: "header_too_large",
    500: "internal_error",
    502: "bad_gateway",
    503: "service_unavailable",
}

MESSAGES_BY_STATUS = {
    400: "The request could not be understood.",
    401: "A valid API key is required in the x-api-key header.",
    404: "The requested resource was not found.",
    405: "The method is not allowed for this resource.",
    409: "The request conflicts with the current state of the resource.",
    413: "The request body is larger than 1 MiB.",
    414: "The request target (path and query) is too long.",
    415: "The request body must be JSON (Content-Type: application/json).",
    422: "The request has invalid fields.",
    429: "Rate limit exceeded.",
    431: "A request header is too large.",
    500: "An unexpected error occurred. It has been logged.",
    502: "A provider the service depends on failed to answer.",
    503: "The service is not available.",
}


class AppError(Exception):
    """An error a client can cause; rendered as the error body with its status."""

    status = 500
    code = "internal_error"

    def __init__(
        self,
        message: str | None = None,
        *,
        code: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message or MESSAGES_BY_STATUS.get(self.status, "Error.")
        if code:
            self.code = code
        self.details = details or {}
        self.headers = headers or {}


class BadRequest(AppError):
    status, code = 400, "bad_request"


class Unauthorized(AppError):
    status, code = 401, "unauthorized"


class InsufficientScope(AppError):
    """A valid key whose scope does not allow the request (a read key that writes)."""

    status, code = 403, "insufficient_scope"


class NotFound(AppError):
    status, code = 404, "not_found"


class Conflict(AppError):
    status, code = 409, "conflict"


class IdempotencyInProgress(AppError):
    """A repeat of a request, by its Idempotency-Key, while the first is still running."""

    status, code = 409, "idempotency_in_progress"


class IdempotencyKeyReused(AppError):
    """An Idempotency-Key sent again with another method, path or body."""

    status, code = 422, "idempotency_key_reused"


class URITooLong(AppError):
    status, code = 414, "uri_too_long"


class HeaderTooLarge(AppError):
    status, code = 431, "header_too_large"


class ValidationFailed(AppError):
    status, code = 422, "validation_error"


class RateLimited(AppError):
    status, code = 429, "rate_limited"


class BadGateway(AppError):
    """A provider the service calls for the client (Meta's Graph API) failed or was out of
    reach."""

    status, code = 502, "bad_gateway"


class ServiceUnavailable(AppError):
    status, code = 503, "service_unavailable"


class ErrorDetailSchema(ma.Schema):
    code = ma.fields.String(
        required=True, metadata={"description": "Machine-readable code, e.g. validation_error."}
    )
    message = ma.fields.String(required=True, metadata={"description": "One human sentence."})
    details = ma.fields.Dict(
        required=True,
        metadata={"description": "Per-field messages for validation errors; otherwise {}."},
    )
    requestId = ma.fields.String(
        allow_none=True, metadata={"description": "Also in the X-Request-Id header."}
    )


class ErrorSchema(ma.Schema):
    """The body of every error response."""

    error = ma.fields.Nested(ErrorDetailSchema, required=True)


def error_body(
    status: int, code: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "error": {
            "code": code,
            "message": message,
            "details": details or {},
            "requestId": g.setdefault("request_id", new_id("req")),
        }
    }


def error_response(status: int, code: str, message: str, details=None, headers=None):
    response = jsonify(error_body(status, code, message, details))
    response.status_code = status
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def _flatten_validation_messages(messages: Any) -> dict[str, Any]:
    """webargs nests messages by location ({"json": {...}, "query": {...}}); merge them."""
    if not isinstance(messages, dict):
        return {"_schema": messages}
    details: dict[str, Any] = {}
    for location, fields in messages.items():
        if isinstance(fields, dict):
            details.update(fields)
        else:
            details[location if location not in ("json", "query", "querystring") else "_schema"] = (
                fields
            )
    return details


def _validation_message(details: dict[str, Any]) -> str:
    fields = [name for name in details if name != "_schema"]
    if not fields:
        return "The request body is not a valid object for this operation."
    return "Invalid value for " + ", ".join(fields) + "."


def handle_app_error(error: AppError):
    return error_response(error.status, error.code, error.message, error.details, error.headers)


def handle_http_exception(error: HTTPException):
    status = error.code or 500
    data = getattr(error, "data", None) or {}
    headers = dict(data.get("headers") or {})
    if status == 405 and error.valid_methods:  # type: ignore[attr-defined]
        headers["Allow"] = ", ".join(error.valid_methods)  # type: ignore[attr-defined]
    code = CODES_BY_STATUS.get(status) or HTTPStatus(status).name.lower()
    message = MESSAGES_BY_STATUS.get(status) or HTTPStatus(status).phrase + "."
    details: dict[str, Any] = {}
    if status == 422 and "messages" in data:
        details = _flatten_validation_messages(data["messages"])
        message = _validation_message(details)
    elif status == 400 and "messages" in data:
        message = "The request body is not valid JSON."
    return error_response(status, code, message, details, headers)


# How each database names the violation of a unique index or of a foreign key (psycopg2's
# pgcode, sqlite3's sqlite_errorname) and what the answer says of it.
CONSTRAINT_MESSAGES = {
    "23505": "A record with the same unique value exists already.",
    "SQLITE_CONSTRAINT_UNIQUE": "A record with the same unique value exists already.",
    "SQLITE_CONSTRAINT_PRIMARYKEY": "A record with the same unique value exists already.",
    "23503": "The request refers to a record that no longer exists.",
    "SQLITE_CONSTRAINT_FOREIGNKEY": "The request refers to a record that no longer exists.",
}


def integrity_conflict(error: pw.IntegrityError) -> Conflict | None:
    """The Conflict a write refused by a unique index or a foreign key stands for (two
    identical creates in a race: the first wins, the second is told so); None for another
    constraint (NOT NULL, CHECK), which is a bug rather than the client's doing."""
    driver_error = error.__context__  # peewee raises its own type from the driver's error
    name = getattr(driver_error, "pgcode", None) or getattr(driver_error, "sqlite_errorname", None)
    message = CONSTRAINT_MESSAGES.get(name or "")
    return None if message is None else Conflict(message)


def handle_integrity_error(error: pw.IntegrityError):
    conflict = integrity_conflict(error)
    if conflict is None:
        return handle_unexpected(error)
    return handle_app_error(conflict)


def handle_unexpected(error: Exception):
    log.exception("unhandled error", exc_info=error)
    return error_response(500, "internal_error", MESSAGES_BY_STATUS[500])


def init_app(app: Flask) -> None:
    app.register_error_handler(AppError, handle_app_error)
    app.register_error_handler(HTTPException, handle_http_exception)
    app.register_error_handler(pw.IntegrityError, handle_integrity_error)
    app.register_error_handler(Exception, handle_unexpected)
