"""The HTTP layer: one blueprint per resource, registered from register_blueprints."""

import re

from flask_smorest import Api

from app.auth import API_KEY_SCHEME, RUNTIME_SCHEME
from app.resources import health
from app.resources.agents.routes import blp as agents_blp
from app.resources.phone_numbers.routes import blp as phone_numbers_blp
from app.resources.webhooks.routes import blp as webhooks_blp

TENANT_BLUEPRINTS = [agents_blp, phone_numbers_blp, webhooks_blp]
RUNTIME_BLUEPRINTS: list = []

BODY_ERRORS = ("BAD_REQUEST", "REQUEST_ENTITY_TOO_LARGE", "UNSUPPORTED_MEDIA_TYPE")
STATUS_OF = {
    "BAD_REQUEST": "400",
    "UNAUTHORIZED": "401",
    "NOT_FOUND": "404",
    "REQUEST_ENTITY_TOO_LARGE": "413",
    "UNSUPPORTED_MEDIA_TYPE": "415",
    "TOO_MANY_REQUESTS": "429",
    "SERVICE_UNAVAILABLE": "503",
}


def register_blueprints(api: Api) -> None:
    api.spec.components.security_scheme("ApiKeyAuth", API_KEY_SCHEME)
    api.spec.components.security_scheme("RuntimeToken", RUNTIME_SCHEME)
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
                names.append("TOO_MANY_REQUESTS")
            if runtime:
                names.append("SERVICE_UNAVAILABLE")
            if re.search(r"\{[^}]+\}", path):
                names.append("NOT_FOUND")
            if method in ("post", "put", "patch") and "requestBody" in operation:
                names.extend(BODY_ERRORS)
            responses = operation.setdefault("responses", {})
            for name in names:
                responses.setdefault(STATUS_OF[name], api.spec.components.get_ref("response", name))
