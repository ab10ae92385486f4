"""Tenant isolation: every tenant API route that takes an id answers 404 to another tenant."""

import re

import pytest

from app.models import ALL_MODELS, Delivery, PhoneNumber
from app.resources import TENANT_BLUEPRINTS
from app.services import billing, events
from app.services import campaigns as campaign_service
from app.services import functions as function_service
from app.services import phone_numbers as number_service
from app.services import webhooks as webhook_service
from app.services.calls import lifecycle as call_lifecycle
from app.services.whatsapp import accounts as whatsapp_accounts
from app.util import new_id
from tests.fake_graph import number
from tests.helpers import ACTOR


def make_webhook(ctx):
    return webhook_service.create_webhook(
        actor=ACTOR,
        tenant=ctx["tenant"],
        url="https://hooks.example.com/in",
        events=["call.ended"],
        secret="s" * 16,
    )


def make_delivery(ctx):
    event = events.record(tenant_id=ctx["tenant"].id, type="call.ended", data={})
    return Delivery.create(
        id=new_id("dlv"), tenant=ctx["tenant"], webhook=make_webhook(ctx), event=event
    )


FUNCTION = {
    "name": "lookup_order",
    "description": "Look up an order.",
    # Nothing listens there: the owner's test of it is refused at once.
    "endpoint": "http://127.0.0.1:9/orders",
    "parameters": {"type": "object", "properties": {}},
}


def make_call(ctx) -> str:
    """A call of tenant A, recorded through the runtime's service."""
    number = number_service.add_number(
        actor=ACTOR, tenant=ctx["tenant"], display_number="+6221555098"
    )
    number_service.assign_agent(
        actor=ACTOR, tenant=ctx["tenant"], number_id=number.id, agent_id=ctx["agent_id"]
    )
    billing.grant(actor=ACTOR, tenant=ctx["tenant"], minutes=5)
    call = call_lifecycle.start_call(did=number.display_number, caller_number="+628111222333").call
    call_lifecycle.add_transcript(call_id=call.id, turns=[{"role": "caller", "text": "Halo?"}])
    return call.id


def make_campaign(ctx) -> str:
    """A campaign of tenant A, from a number of its own, with one contact."""
    number = number_service.add_number(
        actor=ACTOR, tenant=ctx["tenant"], display_number="+6221555097"
    )
    number_service.assign_agent(
        actor=ACTOR, tenant=ctx["tenant"], number_id=number.id, agent_id=ctx["agent_id"]
    )
    billing.grant(actor=ACTOR, tenant=ctx["tenant"], minutes=5)
    return campaign_service.create_campaign(
        actor=ACTOR,
        tenant=ctx["tenant"],
        name="Reminders",
        phone_number_id=number.id,
        contacts=[campaign_service.Contact(to="+6281300000001", variables={})],
    ).id


def linked_account(ctx):
    """Tenant A's WhatsApp Business account, with one imported number, from the Graph API
    stand-in (linked once per test)."""
    if "account" not in ctx:
        ctx["fake_graph"].add_waba(
            "4001", "EAAG-isolation-token", [number("5001", "+62 811-555-0001")]
        )
        ctx["account"] = whatsapp_accounts.link(
            actor=ACTOR,
            tenant=ctx["tenant"],
            waba_id="4001",
            access_token="EAAG-isolation-token",
            app_secret="isolation-app-secret",
        ).account
    return ctx["account"]


def make_number(ctx) -> str:
    """A number of tenant A that answers with A's agent (so unassigning it would show): the
    WhatsApp number its account imported, so that its call permissions can be asked about."""
    imported = PhoneNumber.get(PhoneNumber.whatsapp_account == linked_account(ctx).id)
    number_service.assign_agent(
        actor=ACTOR, tenant=ctx["tenant"], number_id=imported.id, agent_id=ctx["agent_id"]
    )
    return imported.id


# How to make, for tenant A, the resource each URL variable names. A route with a variable
# missing here fails test_every_id_route_is_covered, so new routes cannot skip the check.
FACTORIES = {
    "agent_id": lambda ctx: ctx["agent_id"],
    "number_id": make_number,
    "name": lambda ctx: (
        function_service.create_function(
            actor=ACTOR, tenant=ctx["tenant"], agent_id=ctx["agent_id"], **FUNCTION
        ).name
    ),
    "call_id": make_call,
    "webhook_id": lambda ctx: make_webhook(ctx).id,
    "delivery_id": lambda ctx: make_delivery(ctx).id,
    "event_id": lambda ctx: make_delivery(ctx).event_id,
    "version": lambda ctx: "1",  # every agent has its version 1
    "campaign_id": make_campaign,
    "account_id": lambda ctx: linked_account(ctx).id,
}

# The query of each route that needs one, valid as the owner would send it.
QUERIES = {
    ("GET", "/api/v1/phone-numbers/<number_id>/call-permissions"): "?to=%2B6281300000001",
}

# The body of each route that reads one: valid (the owner's same request succeeds, so the
# other tenant's 404 is not a validation error in disguise) and changing something (so a
# leak would show in the data). A body route missing here fails test_every_body_route_...
BODIES = {
    ("PATCH", "/api/v1/agents/<agent_id>"): {"name": "Taken over", "isActive": False},
    ("POST", "/api/v1/agents/<agent_id>/functions"): {**FUNCTION, "name": "other"},
    ("PATCH", "/api/v1/agents/<agent_id>/functions/<name>"): {"timeoutMs": 600},
    ("POST", "/api/v1/agents/<agent_id>/functions/<name>/test"): {"parameters": {}},
    ("POST", "/api/v1/agents/<agent_id>/functions/<name>/rotate-secret"): {"overlapHours": 1},
    ("POST", "/api/v1/phone-numbers/<number_id>/assign-agent"): {"agentId": None},
    ("PATCH", "/api/v1/webhooks/<webhook_id>"): {"events": ["call.started", "call.ended"]},
    ("POST", "/api/v1/webhooks/<webhook_id>/rotate-secret"): {"overlapHours": 1},
    ("PATCH", "/api/v1/whatsapp/accounts/<account_id>"): {"label": "Taken over"},
    ("POST", "/api/v1/phone-numbers/<number_id>/call-permission-requests"): {
        "to": "+6281300000001"
    },
    # A range without events: a replay the owner makes sends nothing while the test looks.
    ("POST", "/api/v1/webhooks/<webhook_id>/replay"): {
        "since": "2000-01-01T00:00:00Z",
        "until": "2000-01-02T00:00:00Z",
    },
}


@pytest.fixture
def app_config(app_config):
    """No background sweep while the routes are walked: it would attempt the deliveries the
    factories made (the snapshot would then differ for a reason of its own)."""
    return {**app_config, "SWEEP_INTERVAL": 3600.0}


def id_routes(app):
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/api/v1/") and rule.arguments:
            for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
                yield rule, method


def openapi_path(rule) -> str:
    return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule)


def snapshot():
    return {
        model.__name__: [tuple(row.values()) for row in model.select().dicts()]
        for model in ALL_MODELS
        if model.__name__ not in ("ApiKey",)
    }


def test_every_id_route_is_covered(app):
    missing = {arg for rule, _ in id_routes(app) for arg in rule.arguments} - set(FACTORIES)
    assert not missing, f"add an isolation factory for {missing}"


def test_every_body_route_has_a_valid_body(app, client):
    paths = client.get("/api/v1/openapi.json").json["paths"]
    reading = {
        (method, rule.rule)
        for rule, method in id_routes(app)
        if "requestBody" in paths[openapi_path(rule)][method.lower()]
    }
    assert reading == set(BODIES)


def test_other_tenant_gets_404_and_changes_nothing(
    app, client, tenant, headers, agent_id, other_headers, fake_graph
):
    ctx = {"tenant": tenant, "agent_id": agent_id, "fake_graph": fake_graph}
    values = {name: factory(ctx) for name, factory in FACTORIES.items()}
    checked = []
    for rule, method in id_routes(app):
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", lambda m: values[m.group(1)], rule.rule)
        path += QUERIES.get((method, rule.rule), "")
        body = BODIES.get((method, rule.rule))
        before = snapshot()
        response = client.open(path, method=method, json=body, headers=other_headers)
        assert response.status_code == 404, f"{method} {path}: {response.status_code}"
        assert response.json["error"]["code"] == "not_found"
        assert snapshot() == before, f"{method} {path} changed data"
        if body is not None:
            owner = client.open(path, method=method, json=body, headers=headers)
            assert owner.status_code in (200, 201, 202), f"{method} {path}: {owner.status_code}"
        checked.append(f"{method} {rule.rule}")
    assert len(checked) == 38, checked  # every tenant route and verb taking an id


def test_lists_show_nothing_of_another_tenant(
    app, client, tenant, agent_id, other_headers, fake_graph
):
    """Every tenant list (a GET without an id) shows the other tenant none of A's records."""
    ctx = {"tenant": tenant, "agent_id": agent_id, "fake_graph": fake_graph}
    # Ids only: a function's name and a version number are no secrets of the tenant.
    values = [
        factory(ctx) for name, factory in FACTORIES.items() if name not in ("name", "version")
    ]
    tenant_blueprints = {blueprint.name for blueprint in TENANT_BLUEPRINTS}
    lists = [
        rule.rule
        for rule in app.url_map.iter_rules()
        if rule.endpoint.split(".")[0] in tenant_blueprints
        and not rule.arguments
        and "GET" in rule.methods
    ]
    for path in lists:
        response = client.get(path, headers=other_headers)
        assert response.status_code == 200, path
        assert not [value for value in values if value in response.get_data(as_text=True)], path
    assert len(lists) >= 6, lists


@pytest.mark.parametrize("path", ["/api/v1/agents", "/api/v1/phone-numbers", "/api/v1/webhooks"])
def test_lists_show_only_own_records(client, tenant, headers, other_headers, agent_id, path):
    client.post("/api/v1/agents", json={"name": "B", "systemPrompt": "x"}, headers=other_headers)
    make_webhook({"tenant": tenant})
    [own] = client.get(path, headers=headers).json.values()
    [other] = client.get(path, headers=other_headers).json.values()
    assert {item["id"] for item in own}.isdisjoint(item["id"] for item in other)
    assert agent_id not in str(other)


def test_usage_counts_only_the_tenants_own_calls(client, tenant, agent_id, headers, other_headers):
    make_call({"tenant": tenant, "agent_id": agent_id})
    own = client.get("/api/v1/usage", headers=headers).json
    other = client.get("/api/v1/usage", headers=other_headers).json
    assert (own["calls"], own["activeCalls"]) == (1, 1)
    assert (other["calls"], other["activeCalls"]) == (0, 0)
