"""Every dashboard route: another tenant's ids are 404 and change nothing, and no id, query
or form value is ever a 500. New routes are covered by construction (the URL map)."""

import re

import pytest

from app.services import keys as key_service
from app.services import users as user_service
from tests.dashboard.conftest import PASSWORD, csrf_token, sign_in
from tests.helpers import ACTOR
from tests.test_isolation import FACTORIES as API_FACTORIES
from tests.test_isolation import snapshot

VARIABLE = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")

FACTORIES = {
    **API_FACTORIES,
    "key_id": lambda ctx: (
        key_service.create_key(actor=ACTOR, tenant=ctx["tenant"], name="theirs")[0].id
    ),
    "user_id": lambda ctx: (
        user_service.create_user(
            actor=ACTOR,
            tenant=ctx["tenant"],
            email="member@acme.test",
            password=PASSWORD,
            role="viewer",
        ).id
    ),
}

# Form values that would change something if the route let them through.
FORM = {
    "name": "Taken over",
    "systemPrompt": "x",
    "agentId": "",
    "url": "http://127.0.0.1:9/x",
    "events": "call.ended",
    "role": "owner",
    "isActive": "false",
    "description": "x",
    "endpoint": "http://127.0.0.1:9/x",
    "parameters": '{"type": "object", "properties": {}}',
    "timeoutMs": "600",
    "confirm": "yes",
    "since": "2000-01-01T00:00",
}


# Not swept: the stylesheet, and signing out (it would end the sweeping session).
UNSWEPT = {"dashboard.static", "dashboard.sign_out"}


def dashboard_routes(app, with_arguments=True):
    for rule in app.url_map.iter_rules():
        if rule.endpoint.startswith("dashboard.") and rule.endpoint not in UNSWEPT:
            if bool(rule.arguments) == with_arguments:
                for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
                    yield rule, method


@pytest.fixture
def app_config(app_config):
    """No background sweep while the routes are walked: it would place the campaigns' calls
    and attempt the deliveries the factories made, changing what the test says must not."""
    return {**app_config, "SWEEP_INTERVAL": 3600.0}


@pytest.fixture
def intruder(client, other_tenant):
    """client, signed in as the other tenant's owner; a CSRF token of its session."""
    user_service.create_user(
        actor=ACTOR, tenant=other_tenant, email="owner@globex.test", password=PASSWORD, role="owner"
    )
    sign_in(client, "owner@globex.test")
    return client, csrf_token(client.get("/dashboard/"))


def test_every_id_route_has_a_factory(app):
    arguments = {name for rule, _ in dashboard_routes(app) for name in rule.arguments}
    missing = arguments - set(FACTORIES)
    assert not missing, f"add an isolation factory for {missing}"


def test_another_tenants_ids_are_404_on_every_route_and_change_nothing(
    app, intruder, tenant, agent_id, fake_graph
):
    client, token = intruder
    ctx = {"tenant": tenant, "agent_id": agent_id, "fake_graph": fake_graph}
    values = {name: factory(ctx) for name, factory in FACTORIES.items()}
    checked = []
    for rule, method in dashboard_routes(app):
        path = VARIABLE.sub(lambda match: values[match.group(1)], rule.rule)
        before = snapshot()
        data = {**FORM, "csrf_token": token} if method == "POST" else None
        response = client.open(path, method=method, data=data)
        assert response.status_code == 404, f"{method} {path}: {response.status_code}"
        assert response.content_type.startswith("text/html")
        assert snapshot() == before, f"{method} {path} changed data"
        checked.append(f"{method} {rule.rule}")
    assert len(checked) >= 20, checked


JUNK = ["x" * 5000, "%00", "'; DROP TABLE agent; --", "\u202e\u0000", "..%2F..", "9" * 5000]


@pytest.mark.parametrize("junk", JUNK)
def test_junk_ids_queries_and_forms_are_never_a_500(app, signed_in, junk):
    token = csrf_token(signed_in.get("/dashboard/"))
    swept = 0
    for rule, method in [*dashboard_routes(app), *dashboard_routes(app, False)]:
        path = VARIABLE.sub(lambda _: junk.replace("\u0000", "%00"), rule.rule)
        query = {"offset": junk, "status": junk, "from": junk, "type": junk, "agentId": junk}
        if method == "POST":
            data = {name: junk for name in FORM} | {"csrf_token": token, "email": junk}
            response = signed_in.post(path, data=data, query_string=query)
        else:
            response = signed_in.open(path, method=method, query_string=query)
        assert response.status_code < 500, f"{method} {path}: {response.status_code}"
        swept += 1
    assert swept >= 30
    assert signed_in.get("/dashboard/").status_code == 200  # still signed in: all were seen
