"""Tenant isolation: every tenant API route that takes an id answers 404 to another tenant."""

import re

import pytest

from app.models import ALL_MODELS, Delivery, Event
from app.services import billing
from app.services import calls as call_service
from app.services import functions as function_service
from app.services import phone_numbers as number_service
from app.services import webhooks as webhook_service
from app.util import new_id


def make_webhook(ctx):
    return webhook_service.create_webhook(
        tenant=ctx["tenant"],
        url="https://hooks.example.com/in",
        events=["call.ended"],
        secret="s" * 16,
    )


def make_delivery(ctx):
    event = Event.create(id=new_id("evt"), tenant=ctx["tenant"], type="call.ended", data={})
    return Delivery.create(
        id=new_id("dlv"), tenant=ctx["tenant"], webhook=make_webhook(ctx), event=event
    )


FUNCTION = {
    "name": "lookup_order",
    "description": "Look up an order.",
    "endpoint": "https://example.com/orders",
    "parameters": {"type": "object", "properties": {}},
}


def make_call(ctx) -> str:
    """A call of tenant A, recorded through the runtime's service."""
    number = number_service.add_number(tenant=ctx["tenant"], display_number="+6221555098")
    number_service.assign_agent(tenant=ctx["tenant"], number_id=number.id, agent_id=ctx["agent_id"])
    billing.grant(tenant=ctx["tenant"], minutes=5)
    return call_service.start_call(did=number.display_number, caller_number="+628111222333").call.id


# How to make, for tenant A, the resource each URL variable names. A route with a variable
# missing here fails test_every_id_route_is_covered, so new routes cannot skip the check.
FACTORIES = {
    "agent_id": lambda ctx: ctx["agent_id"],
    "number_id": lambda ctx: (
        number_service.add_number(tenant=ctx["tenant"], display_number="+6221555099").id
    ),
    "name": lambda ctx: (
        function_service.create_function(
            tenant=ctx["tenant"], agent_id=ctx["agent_id"], **FUNCTION
        ).name
    ),
    "call_id": make_call,
    "webhook_id": lambda ctx: make_webhook(ctx).id,
    "delivery_id": lambda ctx: make_delivery(ctx).id,
}

BODIES = {"assign-agent": {"agentId": None}, "functions": {**FUNCTION, "name": "other"}}


def id_routes(app):
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/api/v1/") and rule.arguments:
            for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
                yield rule, method


def snapshot():
    return {
        model.__name__: [tuple(row.values()) for row in model.select().dicts()]
        for model in ALL_MODELS
        if model.__name__ not in ("ApiKey",)
    }


def test_every_id_route_is_covered(app):
    missing = {arg for rule, _ in id_routes(app) for arg in rule.arguments} - set(FACTORIES)
    assert not missing, f"add an isolation factory for {missing}"


def test_other_tenant_gets_404_and_changes_nothing(app, client, tenant, agent_id, other_headers):
    ctx = {"tenant": tenant, "agent_id": agent_id}
    values = {name: factory(ctx) for name, factory in FACTORIES.items()}
    checked = 0
    for rule, method in id_routes(app):
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", lambda m: values[m.group(1)], rule.rule)
        before = snapshot()
        body = BODIES.get(path.rsplit("/", 1)[-1]) if method in ("POST", "PATCH", "PUT") else None
        response = client.open(path, method=method, json=body, headers=other_headers)
        assert response.status_code == 404, f"{method} {path}: {response.status_code}"
        assert response.json["error"]["code"] == "not_found"
        assert snapshot() == before, f"{method} {path} changed data"
        checked += 1
    assert checked >= 4


@pytest.mark.parametrize("path", ["/api/v1/agents", "/api/v1/phone-numbers", "/api/v1/webhooks"])
def test_lists_show_only_own_records(client, tenant, headers, other_headers, agent_id, path):
    client.post("/api/v1/agents", json={"name": "B", "systemPrompt": "x"}, headers=other_headers)
    make_webhook({"tenant": tenant})
    [own] = client.get(path, headers=headers).json.values()
    [other] = client.get(path, headers=other_headers).json.values()
    assert {item["id"] for item in own}.isdisjoint(item["id"] for item in other)
    assert agent_id not in str(other)
