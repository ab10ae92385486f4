"""The HTTP layer: one blueprint per resource, registered from register_blueprints."""

import re

from flask_smorest import Api

from app.auth import API_KEY_SCHEME, RUNTIME_SCHEME
from app.resources import health
from app.resources.agents.routes import blp as agents_blp
from app.resources.calls.routes import blp as calls_blp
from app.resources.credits.routes import blp as credits_blp
from app.resources.functions.routes import blp as functions_blp
from app.resources.phone_numbers.routes import blp as phone_numbers_blp
from app.resources.webhooks.routes import blp as webhooks_blp
from app.runtime.routes import blp as runtime_blp

TENANT_BLUEPRINTS = [
    agents_blp,
    phone_numbers_blp,
    functions_blp,
    calls_blp,
    credits_blp,
    webhooks_blp,
]
RUNTIME_BLUEPRINTS: list = [runtime_blp]

BODY_ERRORS = ("BAD_REQUEST", "REQUEST_ENTITY_TOO_LARGE", "UNSUPPORTED_MEDIA_TYPE")
STATUS_OF = {
    "BAD_REQUEST": "400",
    "UNAUTHORIZED": "401",
    "NOT_FOUND": "404",
    "REQUEST_ENTITY_TOO_LARGE": "413",
    "UNSUPPORTED_MEDIA_TYPE": "415",
    "RATE_LIMITED": "429",
    "SERVICE_UNAVAILABLE": "503",
}


RATE_LIMIT_HEADERS = {
    "X-RateLimit-Limit": "Requests allowed per minute for your tenant (all keys together).",
    "X-RateLimit-Remaining": (
        "Requests left in the current one-minute window. For limits of 2,000 a minute or "
        "more it can read a little lower until the window is half used (counts other "
        "server processes took in advance)."
    ),
    "X-RateLimit-Reset": "Unix time (seconds) at which the current window ends.",
}


def register_blueprints(api: Api) -> None:
    api.spec.components.security_scheme("ApiKeyAuth", API_KEY_SCHEME)
    api.spec.components.security_scheme("RuntimeToken", RUNTIME_SCHEME)
    for name, description in RATE_LIMIT_HEADERS.items():
        api.spec.components.header(
            name, {"description": description, "schema": {"type": "integer"}}
        )
    api.spec.components.header(
        "Retry-After",
        {"description": "Seconds until the window ends.", "schema": {"type": "integer"}},
    )
    api.spec.components.response(
        "RATE_LIMITED",
        {
            "description": "Rate limit exceeded (starter 60, business 300 requests per minute, "
            "enterprise as agreed); error code rate_limited.",
            "headers": {
                name: {"$ref": f"#/components/headers/{name}"}
                for name in ["Retry-After", *RATE_LIMIT_HEADERS]
            },
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        },
    )
    api.register_blueprint(health.blp)
    for blp in TENANT_BLUEPRINTS + RUNTIME_BLUEPRINTS:
        api.register_blueprint(blp)
    document_errors(api)


def document_errors(api: Api) -> None:
    """Add the error responses every operation can give, from the layers around the views."""
    for path, operations in api.spec._paths.items():
        tenant = path.startswith("/api/v1/")
        runtime = path.startswith("/internal/v1/")
        for method, operation in operations.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            names: list[str] = []
            if tenant or runtime:
                names.append("UNAUTHORIZED")
                operation["security"] = [{"ApiKeyAuth": []}] if tenant else [{"RuntimeToken": []}]
            if tenant:
                names.append("RATE_LIMITED")
            if runtime:
                names.append("SERVICE_UNAVAILABLE")
            if re.search(r"\{[^}]+\}", path):
                names.append("NOT_FOUND")
            if method in ("post", "put", "patch"):
                # Any body sent must be JSON (common.require_json_body), even where none is read.
                names.extend(BODY_ERRORS if "requestBody" in operation else BODY_ERRORS[-1:])
            responses = operation.setdefault("responses", {})
            for name in names:
                responses.setdefault(STATUS_OF[name], api.spec.components.get_ref("response", name))
            if tenant:
                for response in responses.values():
                    if "$ref" not in response:
                        response["headers"] = {
                            name: {"$ref": f"#/components/headers/{name}"}
                            for name in RATE_LIMIT_HEADERS
                        }
