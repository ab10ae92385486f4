"""Pieces shared by the HTTP layer: blueprints with their auth hook, the base schemas."""

from typing import Any

import marshmallow as ma
from flask import request
from flask_smorest import Blueprint

from app.auth import READ_METHODS, require_api_key, require_runtime_token, require_scope
from app.errors import AppError
from app.resources import idempotency
from app.resources.fields import MAX_INT32, StrictInteger, Timestamp
from app.resources.guards import ArgumentsParser, refuse_nul_characters
from app.services import secrets
from app.services.pages import COUNT_LIMIT
from app.util import camelcase

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
    SECURITY_SCHEMES: tuple[str, ...]  # any one of them will do
    # The errors the hooks around every view may answer: (status, response component).
    GUARD_ERRORS: tuple[tuple[int, str], ...] = ((401, "UNAUTHORIZED"),)
    # Those it may also answer to a request that changes something (not GET).
    WRITE_GUARD_ERRORS: tuple[tuple[int, str], ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.before_request(require_json_body)
        self.before_request(refuse_nul_characters)
        self._prepare_doc_cbks.append(self._prepare_guard_doc)

    def _prepare_guard_doc(
        self, doc: dict[str, Any], doc_info: dict[str, Any], *, method: str, **kwargs: Any
    ) -> dict[str, Any]:
        """Document the security scheme and the errors the hooks around the view answer."""
        doc["security"] = [{scheme: []} for scheme in self.SECURITY_SCHEMES]
        errors = list(self.GUARD_ERRORS)
        if method.upper() not in READ_METHODS:
            errors.extend(self.WRITE_GUARD_ERRORS)
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
    """A blueprint of the tenant API (/api/v1): every request needs an API key (in the
    x-api-key header, or as Authorization: Bearer).

    The key is checked by app.auth.authenticate_request, an app-level hook that runs before
    the rate limiter, so the limiter can count per tenant and bad keys count for nobody; its
    scope by app.auth.authorize_request, after the limiter, so a read key's refused write
    counts like any request of its tenant.
    """

    authenticate = staticmethod(require_api_key)
    authorize = staticmethod(require_scope)  # a read key may only read (403)
    rate_limited = True
    SECURITY_SCHEMES = ("ApiKeyAuth", "ApiKeyBearer")  # x-api-key, or Authorization: Bearer
    GUARD_ERRORS = ((401, "UNAUTHORIZED"), (429, "RATE_LIMITED"))
    WRITE_GUARD_ERRORS = ((403, "INSUFFICIENT_SCOPE"),)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Every POST takes an Idempotency-Key: after the input guards, so a request they
        # refuse takes no key (idempotency.IdempotencyPlugin documents it on every POST).
        self.before_request(idempotency.begin_request)
        self.after_request(idempotency.finish_request)
        self.teardown_request(idempotency.abandon_request)

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
    SECURITY_SCHEMES = ("RuntimeToken",)
    GUARD_ERRORS = ((401, "UNAUTHORIZED"), (503, "SERVICE_UNAVAILABLE"))


class Schema(ma.Schema):
    """Base of every schema: fields are named in camelCase on the wire, and unknown fields in
    a body are an error, so typos surface."""

    class Meta:
        unknown = ma.RAISE

    def on_bind_field(self, field_name: str, field_obj: ma.fields.Field) -> None:
        """marshmallow's recipe for camelCase keys: one place names every field of the API."""
        field_obj.data_key = camelcase(field_obj.data_key or field_name)


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
        required=True,
        metadata={"description": "Whether records exist after this page (always exact)."},
    )


# The answer that shows a new secret must not be kept by any cache on the way.
NO_STORE = {"Cache-Control": "no-store"}
SAME_SECRET = "The secret given is the current one; error code secret_unchanged."


class SecretRotationSchema(Schema):
    """Body of POST …/rotate-secret (a webhook's or a function's): both fields optional."""

    secret = ma.fields.String(
        load_only=True,
        validate=ma.validate.Length(secrets.MIN_LENGTH, secrets.MAX_LENGTH),
        metadata={
            "description": f"The new secret ({secrets.MIN_LENGTH}–{secrets.MAX_LENGTH} "
            "characters, not the current one); generated when absent. Either way it is shown "
            "once, in the answer."
        },
    )
    overlap_hours = StrictInteger(
        load_default=secrets.DEFAULT_OVERLAP_HOURS,
        validate=ma.validate.Range(0, secrets.MAX_OVERLAP_HOURS),
        metadata={
            "description": "How long the current secret keeps signing beside the new one, "
            f"in hours: 0 to {secrets.MAX_OVERLAP_HOURS} (a week), default "
            f"{secrets.DEFAULT_OVERLAP_HOURS}; 0 ends it at once. A rotation during an "
            "overlap ends the older secret."
        },
    )


def previous_secret_expires_at() -> ma.fields.Field:
    """When the secret a rotation replaced stops signing, or null (a response field)."""
    return Timestamp(
        attribute="overlap_ends_at",
        required=True,
        allow_none=True,
        metadata={
            "description": "While a rotated secret overlaps: when the previous secret stops "
            "signing (it signs beside the new one until then); null otherwise."
        },
    )
