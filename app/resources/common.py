"""Pieces shared by the HTTP layer: blueprints with their auth hook, the base schemas."""

from typing import Any

import marshmallow as ma
from flask import request
from flask_smorest import Blueprint

from app.auth import require_api_key, require_runtime_token
from app.errors import AppError
from app.resources.fields import MAX_INT32
from app.resources.guards import ArgumentsParser, refuse_nul_characters
from app.services.pages import COUNT_LIMIT

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


class GuardedBlueprint(Blueprint):
    """A blueprint whose requests pass the input guards: JSON bodies only, bounded, no NUL."""

    ARGUMENTS_PARSER = ArgumentsParser()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.before_request(require_json_body)
        self.before_request(refuse_nul_characters)


class TenantBlueprint(GuardedBlueprint):
    """A blueprint of the tenant API (/api/v1): every request needs an API key.

    The key is checked by app.auth.authenticate_request, an app-level hook that runs before
    the rate limiter, so the limiter can count per tenant and bad keys count for nobody.
    """

    authenticate = staticmethod(require_api_key)
    rate_limited = True


class RuntimeBlueprint(GuardedBlueprint):
    """A blueprint of the runtime API (/internal/v1): every request needs the runtime token."""

    authenticate = staticmethod(require_runtime_token)


class Schema(ma.Schema):
    """Base of every schema: unknown fields in a body are an error, so typos surface."""

    class Meta:
        unknown = ma.RAISE


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
