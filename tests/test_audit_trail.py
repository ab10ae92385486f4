"""Every change leaves exactly one audit entry, by the right actor (DESIGN sections 10 and 14).

Table-driven over the URL map and the CLI: every mutating route of the tenant API (POST, PUT,
PATCH, DELETE under /api/v1), every POST of the dashboard and every CLI command is either in a
table (the request that changes something, and the action its entry names) or exempt with
the reason it writes none. A route or command in neither fails
test_every_route_and_command_is_in_a_table: a new one needs its row.
"""

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import click
import pytest

from app.models import AuditEntry, Call
from app.services import agents as agent_service
from app.services import billing
from app.services import campaigns as campaign_service
from app.services import functions as function_service
from app.services import keys as key_service
from app.services import phone_numbers as number_service
from app.services import users as user_service
from app.services import webhooks as webhook_service
from app.services.calls import outbound as outbound_calls
from app.services.whatsapp import accounts as whatsapp_accounts
from app.util import utcnow
from tests.dashboard.conftest import PASSWORD, PerRequestContextClient, csrf_token, sign_in
from tests.fake_graph import number as listed_number
from tests.helpers import ACTOR
from tests.whatsapp import whatsapp_number

MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
VARIABLE = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")
IDS = re.compile(r"\{(\w+)\}")  # {number_id} in a body: the id of the world's record
OWNER = "owner@acme.test"
MEMBER = "member@acme.test"
URL = "http://127.0.0.1:9/in"
CALLEE = "+6281311112222"  # nothing listens: deliveries fail, which no test here awaits
# WhatsApp Business accounts on the Graph API stand-in: the world's linked one, and one to link.
WABA, TOKEN = "7001", "EAAG-audit-token-7001"
NEW_WABA, NEW_TOKEN = "7002", "EAAG-audit-token-7002"
WHATSAPP_SECRETS = {"WHATSAPP_ACCESS_TOKEN": NEW_TOKEN, "WHATSAPP_APP_SECRET": "audit-app-secret"}
FUNCTION = {
    "name": "book",
    "description": "Book a slot.",
    "endpoint": "http://127.0.0.1:9/book",
    "parameters": {"type": "object", "properties": {}},
}


@dataclass
class World:
    """One of each record a request can name, of the tenant whose changes are audited."""

    ids: dict[str, str] = field(default_factory=dict)
    member: Any = None
    tenant: Any = None


@pytest.fixture
def world(tenant, fake_graph) -> World:
    agent = agent_service.create_agent(
        actor=ACTOR, tenant=tenant, name="Reception", system_prompt="Be helpful."
    )
    function_service.create_function(actor=ACTOR, tenant=tenant, agent_id=agent.id, **FUNCTION)
    number = number_service.add_number(actor=ACTOR, tenant=tenant, display_number="+6221555010")
    number_service.assign_agent(actor=ACTOR, tenant=tenant, number_id=number.id, agent_id=agent.id)
    webhook = webhook_service.create_webhook(
        actor=ACTOR, tenant=tenant, url=URL, events=["call.ended"], secret="s" * 24
    )
    delivery = webhook_service.send_test(actor=ACTOR, tenant=tenant, webhook_id=webhook.id)
    key, _ = key_service.create_key(actor=ACTOR, tenant=tenant, name="spare")
    billing.grant(actor=ACTOR, tenant=tenant, minutes=100)
    call = outbound_calls.place_call(
        actor=ACTOR, tenant=tenant, phone_number_id=number.id, to=CALLEE
    )
    campaign = campaign_service.create_campaign(
        actor=ACTOR,
        tenant=tenant,
        name="Reminders",
        phone_number_id=number.id,
        contacts=[campaign_service.Contact(to=CALLEE, variables={})],
    )
    member = user_service.create_user(
        actor=ACTOR, tenant=tenant, email=MEMBER, password=PASSWORD, role="viewer"
    )
    user_service.create_user(
        actor=ACTOR, tenant=tenant, email=OWNER, password=PASSWORD, role="owner"
    )
    fake_graph.add_waba(WABA, TOKEN, [listed_number("8001", "+62 811-700-0001")])
    fake_graph.add_waba(NEW_WABA, NEW_TOKEN, [listed_number("8002", "+62 811-700-0002")])
    account = whatsapp_accounts.link(
        actor=ACTOR, tenant=tenant, waba_id=WABA, access_token=TOKEN, app_secret="app-secret-1"
    ).account
    ids = {
        "agent_id": agent.id,
        "name": FUNCTION["name"],
        "number_id": number.id,
        "webhook_id": webhook.id,
        "delivery_id": delivery.id,
        "key_id": key.id,
        "user_id": member.id,
        "version": "1",  # the agent before its function: restoring it changes the agent
        "call_id": call.id,
        "campaign_id": campaign.id,
        "account_id": account.id,
    }
    return World(ids=ids, member=member, tenant=tenant)


def disable_member(world: World) -> None:
    user_service.disable(actor=ACTOR, user=world.member)


def pause_campaign(world: World) -> None:
    campaign_service.pause_campaign(
        actor=ACTOR, tenant=world.tenant, campaign_id=world.ids["campaign_id"]
    )


def use_whatsapp_number(world: World) -> None:
    """The request names a WhatsApp number of the tenant (Meta is the tests' stand-in)."""
    world.ids["number_id"] = whatsapp_number(world.tenant).id


def end_with_turns(world: World) -> None:
    """The call has ended with a transcript: it may be analysed."""
    Call.update(status="ended", ended_at=utcnow(), turns_count=2).where(
        Call.id == world.ids["call_id"]
    ).execute()


@dataclass(frozen=True)
class Change:
    """A request that changes something, and the action of the one entry it writes."""

    action: str
    body: dict[str, Any] | None = None
    prepare: Callable[[World], None] | None = None
    env: dict[str, str] | None = None  # a command's environment variables


# The tenant API: (method, rule) -> the change a request with an API key makes.
API = {
    ("POST", "/api/v1/agents"): Change(
        "agent.created", {"name": "Front desk", "systemPrompt": "Hi."}
    ),
    ("PATCH", "/api/v1/agents/<agent_id>"): Change("agent.updated", {"name": "Front desk"}),
    ("DELETE", "/api/v1/agents/<agent_id>"): Change("agent.deleted"),
    ("POST", "/api/v1/calls"): Change(
        "call.placed", {"phoneNumberId": "{number_id}", "to": "+6281311113333"}
    ),
    ("POST", "/api/v1/calls/<call_id>/cancel"): Change("call.canceled"),
    ("POST", "/api/v1/calls/<call_id>/analyze"): Change(
        "call.analysis_requested", prepare=end_with_turns
    ),
    ("POST", "/api/v1/campaigns"): Change(
        "campaign.created",
        {"name": "Follow-up", "phoneNumberId": "{number_id}", "contacts": [{"to": CALLEE}]},
    ),
    ("POST", "/api/v1/campaigns/<campaign_id>/pause"): Change("campaign.paused"),
    ("POST", "/api/v1/campaigns/<campaign_id>/resume"): Change(
        "campaign.resumed", prepare=pause_campaign
    ),
    ("POST", "/api/v1/campaigns/<campaign_id>/cancel"): Change("campaign.canceled"),
    ("POST", "/api/v1/agents/<agent_id>/functions"): Change(
        "function.created", {**FUNCTION, "name": "cancel"}
    ),
    ("PATCH", "/api/v1/agents/<agent_id>/functions/<name>"): Change(
        "function.updated", {"timeoutMs": 600}
    ),
    ("DELETE", "/api/v1/agents/<agent_id>/functions/<name>"): Change("function.deleted"),
    ("POST", "/api/v1/agents/<agent_id>/functions/<name>/rotate-secret"): Change(
        "function.secret_rotated", {}
    ),
    ("POST", "/api/v1/agents/<agent_id>/versions/<int(max=2147483647):version>/restore"): Change(
        "agent.restored"
    ),
    ("POST", "/api/v1/phone-numbers/<number_id>/assign-agent"): Change(
        "number.assigned", {"agentId": None}
    ),
    ("POST", "/api/v1/phone-numbers/<number_id>/call-permission-requests"): Change(
        "call_permission.requested", {"to": CALLEE}, prepare=use_whatsapp_number
    ),
    ("POST", "/api/v1/webhooks"): Change(
        "webhook.created", {"url": URL, "events": ["call.started"], "secret": "t" * 24}
    ),
    ("PATCH", "/api/v1/webhooks/<webhook_id>"): Change(
        "webhook.updated", {"events": ["call.started"]}
    ),
    ("DELETE", "/api/v1/webhooks/<webhook_id>"): Change("webhook.deleted"),
    ("POST", "/api/v1/webhooks/<webhook_id>/rotate-secret"): Change("webhook.secret_rotated", {}),
    ("POST", "/api/v1/webhooks/<webhook_id>/test"): Change("webhook.test_sent"),
    ("POST", "/api/v1/webhooks/<webhook_id>/replay"): Change(
        "webhook.replayed", {"since": "2000-01-01T00:00:00Z"}
    ),
    ("POST", "/api/v1/webhooks/deliveries/<delivery_id>/retry"): Change("delivery.retried"),
    ("POST", "/api/v1/whatsapp/accounts"): Change(
        "whatsapp.linked",
        {"wabaId": NEW_WABA, "accessToken": NEW_TOKEN, "appSecret": "app-secret-2"},
    ),
    ("PATCH", "/api/v1/whatsapp/accounts/<account_id>"): Change(
        "whatsapp.updated", {"label": "Main"}
    ),
    ("DELETE", "/api/v1/whatsapp/accounts/<account_id>"): Change("whatsapp.unlinked"),
    ("POST", "/api/v1/whatsapp/accounts/<account_id>/sync"): Change("whatsapp.synced"),
}


@dataclass(frozen=True)
class Exempt:
    """A request that writes no entry, why, and a body it is sent with to show it."""

    reason: str
    body: dict[str, Any] | None = None


TEST_CHANGES_NOTHING = (
    "a test request to the function's endpoint changes nothing here: no call, no event, no record"
)
API_EXEMPT = {
    ("POST", "/api/v1/agents/<agent_id>/functions/<name>/test"): Exempt(
        TEST_CHANGES_NOTHING, {"parameters": {}}
    ),
}

# The dashboard: POST rule -> the change the signed-in owner's form makes.
DASHBOARD = {
    "/dashboard/agents/new": Change("agent.created", {"name": "Front desk", "systemPrompt": "Hi."}),
    "/dashboard/agents/<agent_id>": Change("agent.updated", {"name": "Front desk"}),
    "/dashboard/agents/<agent_id>/prompt": Change("agent.updated", {"systemPrompt": "Hello."}),
    "/dashboard/agents/<agent_id>/tools": Change("agent.updated", {"toolsEnabled": "end_call"}),
    "/dashboard/agents/<agent_id>/analysis": Change("agent.updated", {"summary": "false"}),
    "/dashboard/calls/<call_id>/analyze": Change("call.analysis_requested", prepare=end_with_turns),
    "/dashboard/agents/<agent_id>/delete": Change("agent.deleted"),
    "/dashboard/phone-numbers/<number_id>/call-permission-requests": Change(
        "call_permission.requested", {"to": CALLEE}, prepare=use_whatsapp_number
    ),
    "/dashboard/agents/<agent_id>/call": Change(
        "call.placed",
        {"phoneNumberId": "{number_id}", "to": "+6281311113333", "variables": "{}"},
    ),
    "/dashboard/campaigns/new": Change(
        "campaign.created",
        {
            "name": "Follow-up",
            "phoneNumberId": "{number_id}",
            "contacts": CALLEE,
            "maxConcurrentCalls": "1",
            "maxAttempts": "1",
            "delayMinutes": "60",
        },
    ),
    "/dashboard/campaigns/<campaign_id>/pause": Change("campaign.paused"),
    "/dashboard/campaigns/<campaign_id>/resume": Change("campaign.resumed", prepare=pause_campaign),
    "/dashboard/campaigns/<campaign_id>/cancel": Change("campaign.canceled"),
    "/dashboard/agents/<agent_id>/functions": Change(
        "function.created",
        {
            "name": "cancel",
            "description": "Cancel a booking.",
            "endpoint": "http://127.0.0.1:9/cancel",
            "method": "POST",
            "parameters": '{"type": "object", "properties": {}}',
            "timeoutMs": "5000",
        },
    ),
    "/dashboard/agents/<agent_id>/functions/<name>": Change(
        "function.updated", {"timeoutMs": "600"}
    ),
    "/dashboard/agents/<agent_id>/functions/<name>/delete": Change("function.deleted"),
    "/dashboard/agents/<agent_id>/functions/<name>/rotate-secret": Change(
        "function.secret_rotated", {"overlapHours": "24"}
    ),
    "/dashboard/agents/<agent_id>/versions/<int(max=2147483647):version>/restore": Change(
        "agent.restored"
    ),
    "/dashboard/phone-numbers/<number_id>/assign-agent": Change("number.assigned", {"agentId": ""}),
    "/dashboard/settings": Change("tenant.threshold_changed", {"minutes": "25"}),
    "/dashboard/settings/api-keys": Change(
        "key.created", {"name": "ci", "scope": "read", "expires": ""}
    ),
    "/dashboard/settings/api-keys/<key_id>/revoke": Change("key.revoked"),
    "/dashboard/settings/team": Change(
        "user.created", {"email": "new@acme.test", "role": "admin", "password": PASSWORD}
    ),
    "/dashboard/settings/team/<user_id>/role": Change("user.role_changed", {"role": "admin"}),
    "/dashboard/settings/team/<user_id>/disable": Change("user.disabled"),
    "/dashboard/settings/team/<user_id>/enable": Change("user.enabled", prepare=disable_member),
    "/dashboard/sign-in": Change("user.signed_in", {"email": OWNER, "password": PASSWORD}),
    "/dashboard/sign-out": Change("user.signed_out"),
    "/dashboard/webhooks/new": Change(
        "webhook.created", {"url": URL, "events": "call.started", "secret": "t" * 24}
    ),
    "/dashboard/webhooks/<webhook_id>": Change("webhook.updated", {"events": "call.started"}),
    "/dashboard/webhooks/<webhook_id>/disable": Change("webhook.updated"),
    "/dashboard/webhooks/<webhook_id>/delete": Change("webhook.deleted"),
    "/dashboard/webhooks/<webhook_id>/rotate-secret": Change(
        "webhook.secret_rotated", {"overlapHours": "24"}
    ),
    "/dashboard/webhooks/<webhook_id>/test": Change("webhook.test_sent"),
    "/dashboard/webhooks/<webhook_id>/replay": Change(
        "webhook.replayed", {"since": "2000-01-01 00:00"}
    ),
    "/dashboard/webhooks/deliveries/<delivery_id>/retry": Change("delivery.retried"),
    "/dashboard/settings/whatsapp": Change(
        "whatsapp.linked",
        {"waba_id": NEW_WABA, "access_token": NEW_TOKEN, "app_secret": "app-secret-2"},
    ),
    "/dashboard/settings/whatsapp/<account_id>/sync": Change("whatsapp.synced"),
    "/dashboard/settings/whatsapp/<account_id>/token": Change(
        "whatsapp.updated", {"access_token": TOKEN}
    ),
    "/dashboard/settings/whatsapp/<account_id>/unlink": Change("whatsapp.unlinked"),
}
DASHBOARD_EXEMPT = {
    "/dashboard/agents/<agent_id>/functions/<name>/test": Exempt(
        TEST_CHANGES_NOTHING, {"parameters": "{}"}
    ),
}

# The CLI: command -> (its arguments, the change it makes).
CLI = {
    "tenants create": (["newco"], Change("tenant.created")),
    "tenants set-plan": (["--tenant", "acme", "starter"], Change("tenant.plan_changed")),
    "tenants set-threshold": (["--tenant", "acme", "25"], Change("tenant.threshold_changed")),
    "keys create": (["--tenant", "acme", "--name", "ci"], Change("key.created")),
    "keys revoke": (["{key_id}"], Change("key.revoked")),
    "numbers add": (["--tenant", "acme", "+6221555099"], Change("number.added")),
    "credits grant": (["--tenant", "acme", "--minutes", "5"], Change("credits.granted")),
    "users create": (
        ["--tenant", "acme", "--email", "new@acme.test", "--password-stdin"],
        Change("user.created"),
    ),
    "users set-password": (["--email", MEMBER, "--password-stdin"], Change("user.password_set")),
    "users disable": (["--email", MEMBER], Change("user.disabled")),
    "users enable": (["--email", MEMBER], Change("user.enabled", prepare=disable_member)),
    "deliveries retry": (["{delivery_id}"], Change("delivery.retried")),
    "whatsapp link": (
        ["--tenant", "acme", "--waba-id", NEW_WABA],
        Change("whatsapp.linked", env=WHATSAPP_SECRETS),
    ),
    "whatsapp sync": (["{account_id}"], Change("whatsapp.synced")),
}
READS = "reads only"
CLI_EXEMPT = {
    "tenants list": READS,
    "keys list": READS,
    "numbers list": READS,
    "users list": READS,
    "deliveries list": READS,
    "whatsapp list": READS,
    "db backup": "copies the database, changes nothing in it",
    "db upgrade": "migrates the schema: no tenant's records change",
    "dev config": "writes the development settings file, not the database",
    "dev check-port": READS,
    "openapi print": "prints the OpenAPI document",
    "openapi write": "writes the OpenAPI document to a file",
    "openapi list-config-prefixes": READS,
    "deliveries sweep": "the worker's periodic upkeep (due deliveries, lapsed credit holds), "
    "which the deliveries and calls record themselves",
    "maintenance prune": "deletes what is older than the retention, the same for every tenant",
    "calls simulate": "drives a call as the voice runtime does: the call and its events record "
    "it, and the runtime's call events are not audit entries",
    "calls dispatch-demo": "claims and drives queued calls as the voice runtime does: the calls "
    "and their events record it, and the runtime's call events are not audit entries",
    "demo": "several changes at once, each entered as the command that makes it alone "
    "(tests/cli/test_commands.py::test_demo_writes_its_changes_to_the_audit_log)",
}


def mutating_api_routes(app) -> set[tuple[str, str]]:
    return {
        (method, rule.rule)
        for rule in app.url_map.iter_rules()
        if rule.rule.startswith("/api/v1/")
        for method in rule.methods & MUTATING
    }


def dashboard_posts(app) -> set[str]:
    return {
        rule.rule
        for rule in app.url_map.iter_rules()
        if rule.endpoint.startswith("dashboard.") and rule.methods & MUTATING
    }


def cli_commands(group: click.Group, prefix: str = "") -> set[str]:
    found = set()
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found |= cli_commands(command, f"{prefix}{name} ")
        else:
            found.add(prefix + name)
    return found


def test_every_route_and_command_is_in_a_table(app):
    assert mutating_api_routes(app) == set(API) | set(API_EXEMPT)
    assert not set(API) & set(API_EXEMPT)
    assert dashboard_posts(app) == set(DASHBOARD) | set(DASHBOARD_EXEMPT)
    assert cli_commands(app.cli) == set(CLI) | set(CLI_EXEMPT)
    assert all(exempt.reason for exempt in [*API_EXEMPT.values(), *DASHBOARD_EXEMPT.values()])


def path_of(rule: str, world: World) -> str:
    return VARIABLE.sub(lambda match: world.ids[match.group(1)], rule)


def body_of(change: Change, world: World) -> dict[str, Any] | None:
    """The change's body with the world's ids put in for {number_id} and the like."""
    if change.body is None:
        return None
    return {
        name: IDS.sub(lambda match: world.ids.get(match.group(1), match.group()), value)
        if isinstance(value, str)
        else value
        for name, value in change.body.items()
    }


def new_entries(before: set[str]) -> list[AuditEntry]:
    return list(AuditEntry.select().where(AuditEntry.id.not_in(before)))


def entry_ids() -> set[str]:
    return {entry.id for entry in AuditEntry.select(AuditEntry.id)}


@pytest.mark.parametrize(
    ("method", "rule"), sorted(API), ids=[" ".join(key) for key in sorted(API)]
)
def test_an_api_change_writes_one_entry_by_its_key(
    client, headers, api_key, world, tenant, method, rule
):
    change = API[method, rule]
    if change.prepare:
        change.prepare(world)
    before = entry_ids()
    body = body_of(change, world)
    response = client.open(path_of(rule, world), method=method, json=body, headers=headers)
    assert response.status_code < 300, response.get_json()
    [entry] = new_entries(before)
    assert (entry.tenant_id, entry.action, entry.actor_type, entry.actor_label) == (
        tenant.id,
        change.action,
        "api_key",
        f"test ({api_key[:12]}…)",
    )
    assert entry.address == "127.0.0.1"


@pytest.mark.parametrize(
    ("method", "rule"), sorted(API_EXEMPT), ids=[" ".join(key) for key in sorted(API_EXEMPT)]
)
def test_an_exempt_api_request_writes_no_entry(client, headers, world, method, rule):
    before = entry_ids()
    body = API_EXEMPT[method, rule].body
    response = client.open(path_of(rule, world), method=method, json=body, headers=headers)
    assert response.status_code < 300, response.get_json()
    assert new_entries(before) == []


@pytest.fixture
def browser(app, world):
    """A test client that keeps its session, as a browser does, signed in as the owner."""
    app.test_client_class = PerRequestContextClient
    client = app.test_client()
    assert sign_in(client, OWNER).status_code == 302
    return client


@pytest.mark.parametrize("rule", sorted(DASHBOARD))
def test_a_dashboard_change_writes_one_entry_by_its_user(app, browser, world, tenant, rule):
    change = DASHBOARD[rule]
    if change.prepare:
        change.prepare(world)
    if rule == "/dashboard/sign-in":
        browser = app.test_client()  # signed out
    token = csrf_token(
        browser.get("/dashboard/sign-in" if rule.endswith("sign-in") else "/dashboard/")
    )
    form = {
        "form_id": secrets.token_urlsafe(16),
        **(body_of(change, world) or {}),
        "csrf_token": token,
    }
    before = entry_ids()
    response = browser.post(path_of(rule, world), data=form)
    assert response.status_code < 400, response.get_data(as_text=True)[:2000]
    [entry] = new_entries(before)
    assert (entry.tenant_id, entry.action, entry.actor_type, entry.actor_label) == (
        tenant.id,
        change.action,
        "user",
        OWNER,
    )
    assert entry.address == "127.0.0.1"


@pytest.mark.parametrize("rule", sorted(DASHBOARD_EXEMPT))
def test_an_exempt_dashboard_request_writes_no_entry(browser, world, rule):
    token = csrf_token(browser.get("/dashboard/"))
    form = {**(DASHBOARD_EXEMPT[rule].body or {}), "csrf_token": token}
    before = entry_ids()
    response = browser.post(path_of(rule, world), data=form)
    assert response.status_code < 400, response.get_data(as_text=True)[:2000]
    assert new_entries(before) == []


@pytest.mark.parametrize("command", sorted(CLI))
def test_a_cli_change_writes_one_entry_by_the_cli(runner, world, command):
    args, change = CLI[command]
    if change.prepare:
        change.prepare(world)
    arguments = [*command.split(), *(arg.format(**world.ids) for arg in args)]
    before = entry_ids()
    result = runner.invoke(args=arguments, input=f"{PASSWORD}-2\n", env=change.env)
    assert result.exit_code == 0, result.output
    [entry] = new_entries(before)
    assert (entry.action, entry.actor_type, entry.actor_label, entry.address) == (
        change.action,
        "cli",
        "CLI",
        None,
    )
