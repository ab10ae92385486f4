"""Authentication: tenant API keys (x-api-key) and the voice runtime's bearer token."""

import hmac

from flask import current_app, g, request

from app.errors import ServiceUnavailable, Unauthorized
from app.models import Tenant
from app.services import keys as key_service

API_KEY_HEADER = "x-api-key"

API_KEY_SCHEME = {
    "type": "apiKey",
    "in": "header",
    "name": API_KEY_HEADER,
    "description": "A tenant API key (dkl_…), created with `flask keys create`.",
}
RUNTIME_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "The voice runtime's token (RUNTIME_TOKEN).",
}


def authenticate_request() -> None:
    """App-level before_request hook: run the matched blueprint's check (tenant or runtime)."""
    blueprint = current_app.blueprints.get(request.blueprint or "")
    check = getattr(blueprint, "authenticate", None)
    if check is not None:
        check()


def require_api_key() -> None:
    """Tenant API check: set g.tenant or answer 401."""
    presented = request.headers.get(API_KEY_HEADER, "")
    if not presented:
        raise Unauthorized("Missing API key: send it in the x-api-key header.")
    tenant = key_service.authenticate(key=presented)
    if tenant is None:
        raise Unauthorized("Invalid or revoked API key.")
    g.tenant = tenant


def current_tenant() -> Tenant:
    return g.tenant


def require_runtime_token() -> None:
    """Runtime API check: constant-time bearer comparison; closed when no token is set."""
    expected = current_app.config.get("RUNTIME_TOKEN")
    if not expected:
        raise ServiceUnavailable(
            "The runtime API is disabled: set RUNTIME_TOKEN to enable it.",
            code="runtime_disabled",
        )
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        token.strip().encode(), str(expected).encode()
    ):
        raise Unauthorized("A valid runtime token is required: Authorization: Bearer <token>.")
