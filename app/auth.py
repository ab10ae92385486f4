"""Authentication: tenant API keys (x-api-key, or Authorization: Bearer) and the voice
runtime's bearer token."""

import hmac

from flask import current_app, g, request

from app.errors import InsufficientScope, ServiceUnavailable, Unauthorized
from app.models import Tenant
from app.services import keys as key_service
from app.services.audit import Actor

API_KEY_HEADER = "x-api-key"
# What a read key may do: read. Flask answers HEAD and OPTIONS for every GET route.
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

API_KEY_SCHEME = {
    "type": "apiKey",
    "in": "header",
    "name": API_KEY_HEADER,
    "description": "A tenant API key (dkl_…), created with `flask keys create`.",
}
# Generated clients send a token as Authorization: Bearer (openapi-python-client's
# AuthenticatedClient does by default): the tenant API takes its key that way too.
API_KEY_BEARER_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "The same tenant API key as Authorization: Bearer dkl_…, as generated "
    "clients send a token. When both are sent they must carry the same key.",
}
RUNTIME_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "The voice runtime's token (RUNTIME_TOKEN).",
}


def _run_blueprint_check(name: str) -> None:
    blueprint = current_app.blueprints.get(request.blueprint or "")
    check = getattr(blueprint, name, None)
    if check is not None:
        check()


def authenticate_request() -> None:
    """App-level before_request hook: run the matched blueprint's check (tenant or runtime)."""
    _run_blueprint_check("authenticate")


def authorize_request() -> None:
    """App-level before_request hook, after the rate limiter (so a refused request counts
    and its answer carries the rate-limit headers): the matched blueprint's scope check."""
    _run_blueprint_check("authorize")


def bearer_token() -> str:
    """The token of an Authorization: Bearer header, or "" (no header, or another scheme)."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def presented_api_key() -> str:
    """The key of the x-api-key header or of Authorization: Bearer; 401 when both are sent
    with different keys (which one was meant is anyone's guess)."""
    header, bearer = request.headers.get(API_KEY_HEADER, ""), bearer_token()
    if header and bearer and header != bearer:
        raise Unauthorized(
            "Two different API keys: the x-api-key header and Authorization: Bearer carry "
            "different keys. Send the key in one of them."
        )
    return header or bearer


def require_api_key() -> None:
    """Tenant API check: set g.tenant and g.api_key or answer 401."""
    presented = presented_api_key()
    if not presented:
        raise Unauthorized("Missing API key: send it in the x-api-key header.")
    authenticated = key_service.authenticate(key=presented)
    if authenticated is None:
        raise Unauthorized("Invalid, expired or revoked API key.")
    g.api_key = authenticated
    g.tenant = authenticated.tenant


def require_scope() -> None:
    """Tenant API check, after require_api_key: a read key may only read; 403 otherwise."""
    authenticated: key_service.Authenticated = g.api_key
    if authenticated.read_only and request.method not in READ_METHODS:
        raise InsufficientScope(
            "This API key is read-only: it may only read (GET). Use a full-access key to "
            "make changes."
        )


def current_tenant() -> Tenant:
    return g.tenant


def current_actor() -> Actor:
    """Who makes a change through the tenant API: the request's key (its name and prefix),
    from the client's address; services write it in their audit entry."""
    return Actor.api_key(g.api_key, request.remote_addr)


def require_runtime_token() -> None:
    """Runtime API check: constant-time bearer comparison; closed when no token is set."""
    expected = current_app.config.get("RUNTIME_TOKEN")
    if not expected:
        raise ServiceUnavailable(
            "The runtime API is disabled: set RUNTIME_TOKEN to enable it.",
            code="runtime_disabled",
        )
    if not hmac.compare_digest(bearer_token().encode(), str(expected).encode()):
        raise Unauthorized("A valid runtime token is required: Authorization: Bearer <token>.")
