"""The HTTP layer: one blueprint per resource, registered from register_blueprints.

The runtime's blueprint (app.runtime) is registered beside these by the app factory: the
runtime builds on this package, never the other way round.
"""

from flask_smorest import Api

from app.auth import API_KEY_BEARER_SCHEME, API_KEY_SCHEME, RUNTIME_SCHEME
from app.errors import ErrorSchema
from app.resources import health
from app.resources.agents.routes import blp as agents_blp
from app.resources.audit.routes import blp as audit_blp
from app.resources.calls.routes import blp as calls_blp
from app.resources.campaigns.routes import blp as campaigns_blp
from app.resources.common import RATE_LIMIT_HEADERS
from app.resources.credits.routes import blp as credits_blp
from app.resources.events.payloads import WebhookEventSchema
from app.resources.events.routes import blp as events_blp
from app.resources.functions.routes import blp as functions_blp
from app.resources.phone_numbers.routes import blp as phone_numbers_blp
from app.resources.usage.routes import blp as usage_blp
from app.resources.versions.routes import blp as versions_blp
from app.resources.webhooks.routes import blp as webhooks_blp
from app.resources.whatsapp.routes import blp as whatsapp_blp

TENANT_BLUEPRINTS = [
    agents_blp,
    phone_numbers_blp,
    whatsapp_blp,
    functions_blp,
    versions_blp,
    calls_blp,
    campaigns_blp,
    credits_blp,
    webhooks_blp,
    events_blp,
    usage_blp,
    audit_blp,
]


def register_blueprints(api: Api) -> None:
    api.spec.components.security_scheme("ApiKeyAuth", API_KEY_SCHEME)
    api.spec.components.security_scheme("ApiKeyBearer", API_KEY_BEARER_SCHEME)
    api.spec.components.security_scheme("RuntimeToken", RUNTIME_SCHEME)
    # No operation answers with it: it is there for receivers to parse a delivery's body with.
    api.spec.components.schema("WebhookEvent", schema=WebhookEventSchema)
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
            "content": {"application/json": {"schema": ErrorSchema}},
        },
    )
    api.spec.components.response(
        "INSUFFICIENT_SCOPE",
        {
            "description": "The API key is read-only (scope read): it may only GET; error code "
            "insufficient_scope.",
            "headers": {
                name: {"$ref": f"#/components/headers/{name}"} for name in RATE_LIMIT_HEADERS
            },
            "content": {"application/json": {"schema": ErrorSchema}},
        },
    )
    api.register_blueprint(health.blp)
    for blp in TENANT_BLUEPRINTS:
        api.register_blueprint(blp)
