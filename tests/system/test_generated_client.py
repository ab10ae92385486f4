"""A Python client generated from the served OpenAPI document, against a real server.

openapi-python-client generates the client from /api/v1/openapi.json as gunicorn serves it
on 127.0.0.1; the client then runs every tenant resource: agents, phone numbers, calls (made
through the runtime API with plain requests), credits, the event log, webhooks with their
deliveries (sent by a real worker to a real receiver) and a replay, and functions. It raises
on any status the document does not list, and every answer must parse into its model. A
webhook is created twice with one Idempotency-Key, the client's own parameter. The package is
generated and the client built as docs/api.md says (its key as the bearer token), and the
example there runs too.
"""

import contextlib
import datetime
import importlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from app.models import Delivery
from app.services import billing
from app.services import phone_numbers as number_service
from tests.call_flow import CALLER, RUNTIME, backdate, end_body
from tests.conftest import DID, RUNTIME_TOKEN
from tests.helpers import ACTOR
from tests.receiver import Receiver
from tests.system.workers import rq_config, wait_until

pytestmark = pytest.mark.slow

PACKAGE = "voice_agent_management_api_client"  # the generator's name, from the title
BIN = Path(sys.executable).parent
API_GUIDE = Path(__file__).parents[2] / "docs" / "api.md"
SECRET = "generated-client-secret"


@pytest.fixture
def app_config(app_config, redis_url, redis_client):
    return rq_config(app_config, redis_url)


@pytest.fixture
def server(workers):
    """gunicorn and a webhooks worker on the test's database; the server's base URL."""
    base_url = workers.start_web(workers=1, RUNTIME_TOKEN=RUNTIME_TOKEN)
    workers.start(queues=("webhooks",))
    return base_url


def generate(document: bytes, folder: Path) -> Path:
    """The package openapi-python-client generates from the document, in folder."""
    (folder / "openapi.json").write_bytes(document)
    # The generator formats its output with ruff, run from PATH: the venv's own.
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    generated = subprocess.run(
        [BIN / "openapi-python-client", "generate", "--path", folder / "openapi.json", "--meta",
         "none", "--fail-on-warning"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert generated.returncode == 0, generated.stdout + generated.stderr
    return folder / PACKAGE


@pytest.fixture
def sdk(server, tmp_path, monkeypatch):
    """The client package generated from the document the server serves, imported."""
    response = requests.get(f"{server}/api/v1/openapi.json", timeout=10)
    assert response.status_code == 200
    generate(response.content, tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module(f"{PACKAGE}.models")
    yield importlib.import_module(PACKAGE)
    for name in [name for name in sys.modules if name.split(".")[0] == PACKAGE]:
        del sys.modules[name]


# client.py is the generator's own template, the same whatever the document: the ruff it runs
# fixes PYI036 (one of ruff's default rules) by typing its __exit__'s arguments `object`,
# which mypy then refuses where they are handed on to httpx. Nothing else may fail.
TEMPLATE_ERROR = re.compile(
    rf'^{PACKAGE}/client\.py:\d+: error: Argument 1 to "__a?exit__" of "(Async)?Client" '
    r'has incompatible type "\*tuple\[object, \.\.\.\]"; .*\[arg-type\]$'
)


def test_the_generated_package_passes_mypy(client, tmp_path):
    package = generate(client.get("/api/v1/openapi.json").data, tmp_path)
    checked = subprocess.run(
        [BIN / "mypy", package.name, "--cache-dir", tmp_path / ".mypy_cache"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    errors = [line for line in checked.stdout.splitlines() if ": error: " in line]
    assert [line for line in errors if not TEMPLATE_ERROR.match(line)] == [], checked.stdout
    assert checked.returncode == (1 if errors else 0), checked.stdout + checked.stderr


def operation(tag: str, operation_id: str):
    """The generated module of one operation: api/<tag>/<operationId in snake case>."""
    return importlib.import_module(f"{PACKAGE}.api.{tag}.{operation_id}")


def parsed(response, status: int):
    assert response.status_code == status, response.content
    return response.parsed


def changed(before, after) -> set[str]:
    """The fields of two versions of a record that differ, but updatedAt and an agent's
    version (which every call-facing change moves)."""
    old, new = before.to_dict(), after.to_dict()
    return {name for name in new if new[name] != old[name]} - {"updatedAt", "version"}


def run_agents(sdk, client):
    """Create, list, get and update an agent; a PATCH of one field changes only that one."""
    models = sdk.models
    body = models.AgentCreate(
        name="Sales",
        system_prompt="You sell solar panels.",
        voice_id=models.AgentCreateVoiceId.KORE,
        greeting_text="Halo!",
        language="en-US",
        max_call_duration_minutes=30,
        tools_enabled=["transfer_call"],
        is_active=True,
        escalation_number="+6281234567",
    )
    agent = parsed(operation("agents", "create_agent").sync_detailed(client=client, body=body), 201)
    assert isinstance(agent, models.Agent) and agent.voice_id == models.AgentVoiceId.KORE
    listed = parsed(operation("agents", "list_agents").sync_detailed(client=client), 200)
    assert [each.id for each in listed.agents] == [agent.id]
    got = parsed(operation("agents", "get_agent").sync_detailed(agent.id, client=client), 200)
    assert got == agent
    update = operation("agents", "update_agent")
    renamed = parsed(
        update.sync_detailed(agent.id, client=client, body=models.AgentUpdate(name="Support")),
        200,
    )
    assert renamed.name == "Support" and changed(agent, renamed) == {"name"}
    assert (agent.version, renamed.version) == (1, 2)
    return renamed


def run_numbers(sdk, client, agent):
    numbers = operation("phone_numbers", "list_phone_numbers")
    (number,) = parsed(numbers.sync_detailed(client=client), 200).phone_numbers
    assert number.display_number == DID and number.agent_id is None
    assign = operation("phone_numbers", "assign_agent")
    body = sdk.models.AssignAgent(agent_id=agent.id)
    assert parsed(assign.sync_detailed(number.id, client=client, body=body), 200).agent_id == (
        agent.id
    )
    return number


TURNS = [
    {"role": "agent", "text": "Halo, ada yang bisa dibantu?", "startMs": 0, "endMs": 1800},
    {"role": "caller", "text": "Saya mau pesan panel surya."},
]
COSTS = {"llm": 700, "stt": 200, "tts": 250, "telephony": 50}
RECORDING = "https://recordings.example.com/calls/1.wav"


def run_call(server) -> str:
    """A whole call through the runtime API, with plain requests: its transcript turns, and
    an end with the recording and the cost by component."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {RUNTIME_TOKEN}"
    started = session.post(server + RUNTIME, json={"did": DID, "callerNumber": CALLER}, timeout=10)
    assert started.status_code == 201, started.text
    call_id = started.json()["id"]
    ended = end_body(aiCostIdr=1200, costBreakdown=COSTS, recordingUrl=RECORDING)
    steps = (("answered", {}), ("transcript", {"turns": TURNS}), ("ended", ended))
    backdate(call_id, ended["durationSeconds"])  # it lived as long as its end reports
    for step, body in steps:
        answer = session.post(f"{server}{RUNTIME}/{call_id}/{step}", json=body, timeout=10)
        assert answer.status_code == 200, answer.text
    return call_id


def run_calls(sdk, client, call_id, agent):
    models = sdk.models
    listing = operation("calls", "list_calls").sync_detailed(
        client=client, status=models.ListCallsStatus.ENDED, from_=datetime.date(2000, 1, 1)
    )
    calls = parsed(listing, 200)
    assert [call.id for call in calls.calls] == [call_id]
    assert calls.pagination.total == 1 and calls.pagination.has_more is False
    call = parsed(operation("calls", "get_call").sync_detailed(call_id, client=client), 200)
    assert call.agent_id == agent.id and call.status == models.CallDetailStatus.ENDED
    assert call.agent_version == agent.version == 2
    assert call.billed_minutes == 2 and call.talk_time_seconds == 80
    assert call.ended_at.tzinfo is not None and call.answered_at is not None
    assert call.recording_url == RECORDING and call.variables.to_dict() == {}
    assert call.cost_breakdown.to_dict() == {**COSTS, "other": 0}
    read = operation("calls", "get_call_transcript").sync_detailed(call_id, client=client)
    transcript = parsed(read, 200)
    assert transcript.call_id == call_id and transcript.transcript_summary is None
    assert [(turn.seq, turn.role.value, turn.text) for turn in transcript.turns] == [
        (1, "agent", TURNS[0]["text"]),
        (2, "caller", TURNS[1]["text"]),
    ]
    assert (transcript.turns[0].start_ms, transcript.turns[1].end_ms) == (0, None)


def run_usage(sdk, client):
    """This month's usage: the call of run_call, its minutes and costs."""
    report = parsed(operation("usage", "get_usage").sync_detailed(client=client), 200)
    assert (report.calls, report.answered_calls, report.billed_minutes) == (1, 1, 2)
    assert report.ai_cost_idr == 1200 and report.cost_breakdown.llm == 700
    assert (report.active_calls, report.concurrent_call_limit) == (0, 20)
    today = datetime.datetime.now(datetime.UTC).date()
    (day,) = [each for each in report.days if each.date == today]
    assert (day.calls, day.billed_minutes, day.ai_cost_idr) == (1, 2, 1200)
    march = operation("usage", "get_usage").sync_detailed(
        client=client, from_=datetime.date(2026, 3, 1), to=datetime.date(2026, 3, 8)
    )
    assert [each.calls for each in parsed(march, 200).days] == [0] * 7


def run_credits(sdk, client):
    balance = parsed(operation("credits_", "get_credits").sync_detailed(client=client), 200)
    assert balance.balance_minutes == 98 and balance.lifetime_used_minutes == 2
    assert (balance.reserved_minutes, balance.available_minutes) == (0, 98)
    ledger = operation("credits_", "list_credit_transactions").sync_detailed(client=client)
    transactions = parsed(ledger, 200).transactions
    assert [entry.type_.value for entry in transactions] == ["usage", "purchase"]
    assert transactions[0].call_id is not None and transactions[1].call_id is None


def run_functions(sdk, client, agent):
    models = sdk.models
    parameters = models.ParametersCreate(
        type_=models.ParametersCreateType.OBJECT,
        properties=models.ParametersCreateProperties.from_dict(
            {"orderId": {"type": "string", "description": "The order number."}}
        ),
        required=["orderId"],
    )
    body = models.FunctionCreate(
        name="lookup_order",
        description="Look up an order.",
        endpoint="http://127.0.0.1:9/orders",
        parameters=parameters,
    )
    create = operation("functions", "create_function")
    created = parsed(create.sync_detailed(agent.id, client=client, body=body), 201)
    assert created.signing_secret.startswith("fsec_") and created.method.value == "POST"
    listing = operation("functions", "list_functions").sync_detailed(agent.id, client=client)
    (function,) = parsed(listing, 200).functions
    assert function.parameters.required == ["orderId"]
    assert function.parameters.properties["orderId"].type_.value == "string"
    assert function.timeout_ms == 5000
    update = operation("functions", "update_function").sync_detailed(
        agent.id, function.name, client=client, body=models.FunctionUpdate(timeout_ms=500)
    )
    updated = parsed(update, 200)
    assert updated.timeout_ms == 500 and changed(function, updated) == {"timeoutMs"}
    test = operation("functions", "test_function")
    refused = test.sync_detailed(agent.id, function.name, client=client, body=models.FunctionTest())
    report = parsed(refused, 200)
    assert (report.ok, report.status_code, report.budget_ms) == (False, None, 500)
    assert report.error.code == "invalid_parameters"
    # No worker serves function tests here: the answer is a timeout, within the budget.
    values = models.FunctionTestParameters.from_dict({"orderId": "A-17"})
    waited = test.sync_detailed(
        agent.id, function.name, client=client, body=models.FunctionTest(parameters=values)
    )
    report = parsed(waited, 200)
    assert report.error.code == "function_timeout" and report.duration_ms <= 500 + 500
    delete = operation("functions", "delete_function")
    assert parsed(delete.sync_detailed(agent.id, function.name, client=client), 204) is None
    listing = operation("functions", "list_functions").sync_detailed(agent.id, client=client)
    assert parsed(listing, 200).functions == []


def create_webhook(sdk, client, url):
    models = sdk.models
    body = models.WebhookCreate(
        url=url,
        events=[
            models.WebhookCreateEventsItem.CALL_STARTED,
            models.WebhookCreateEventsItem.CALL_ENDED,
        ],
        secret=SECRET,
    )
    create = operation("webhooks", "create_webhook")
    webhook = parsed(create.sync_detailed(client=client, body=body, idempotency_key="hook-1"), 201)
    assert webhook.secret_hint == SECRET[-4:] and webhook.is_active is True
    # A retry with the same Idempotency-Key gets the first answer and creates nothing (the
    # list in run_webhooks holds one webhook).
    again = create.sync_detailed(client=client, body=body, idempotency_key="hook-1")
    assert parsed(again, 201) == webhook and again.headers["Idempotent-Replayed"] == "true"
    return webhook


def run_events(sdk, client, webhook, call_id):
    """The call's events in the log, one with its deliveries, and a replay of them all."""
    models = sdk.models
    listing = operation("events", "list_events").sync_detailed(client=client, limit=1)
    first = parsed(listing, 200)
    assert first.has_more is True and isinstance(first.events[0], models.CallStartedEvent)
    rest = operation("events", "list_events").sync_detailed(
        client=client, after=first.next_after, types="call.answered,call.ended"
    )
    page = parsed(rest, 200)
    assert [event.event.value for event in page.events] == ["call.answered", "call.ended"]
    assert page.has_more is False
    # Each event is its own model, and its data a typed model too.
    answered, ended = page.events
    assert isinstance(answered, models.CallAnsweredEvent) and answered.data.call_id == call_id
    assert isinstance(ended, models.CallEndedEvent) and isinstance(ended.data, models.CallEndedData)
    data = ended.data
    assert (data.call_id, data.duration_seconds, data.talk_time_seconds) == (call_id, 95, 80)
    assert (data.hangup_reason, data.hangup_initiator) == ("normal", "caller")
    assert data.ai_cost_idr == 1200
    detail = parsed(operation("events", "get_event").sync_detailed(ended.id, client=client), 200)
    assert isinstance(detail, models.CallEndedEventDetail)
    assert detail.timestamp == ended.timestamp and detail.data.to_dict() == ended.data.to_dict()
    (delivery,) = detail.deliveries
    assert delivery.webhook_id == webhook.id and delivery.status.value == "succeeded"
    body = models.ReplayRequest(since=first.events[0].timestamp)
    replay = operation("webhooks", "replay_webhook").sync_detailed(
        webhook.id, client=client, body=body
    )
    assert parsed(replay, 202).replayed == 2  # call.started and call.ended: it subscribes to those


def parse_delivery(sdk, server, body: bytes):
    """A webhook delivery's body read as the model that the document's WebhookEvent names for
    its event (openapi-python-client makes no class of a union: the receiver picks the event's
    model by its name, as docs/webhooks.md shows)."""
    document = requests.get(f"{server}/api/v1/openapi.json", timeout=10).json()
    mapping = document["components"]["schemas"]["WebhookEvent"]["discriminator"]["mapping"]
    models = {name: getattr(sdk.models, ref.rsplit("/", 1)[1]) for name, ref in mapping.items()}
    received = json.loads(body)
    event = models[received["event"]].from_dict(received)
    assert set(event.to_dict()) == set(received)
    if isinstance(event, sdk.models.CallEndedEvent):
        assert isinstance(event.data, sdk.models.CallEndedData) and event.data.ai_cost_idr == 1200
    return event


def run_webhooks(sdk, client, webhook):
    """List, get, deliveries with their attempts, an update of one field, delete."""
    listed = parsed(operation("webhooks", "list_webhooks").sync_detailed(client=client), 200)
    assert [each.id for each in listed.webhooks] == [webhook.id]
    got = operation("webhooks", "get_webhook").sync_detailed(webhook.id, client=client)
    assert parsed(got, 200) == webhook
    deliveries = operation("webhooks", "list_deliveries").sync_detailed(webhook.id, client=client)
    log = parsed(deliveries, 200).deliveries
    # Each event twice: as it happened, and replayed.
    assert sorted(each.event for each in log) == ["call.ended"] * 2 + ["call.started"] * 2
    for delivery in log:
        assert delivery.status.value == "succeeded" and delivery.completed_at is not None
        (attempt,) = delivery.attempts
        assert attempt.status_code == 200 and attempt.error is None
    update = operation("webhooks", "update_webhook")
    body = sdk.models.WebhookUpdate(is_active=False)
    paused = parsed(update.sync_detailed(webhook.id, client=client, body=body), 200)
    assert paused.is_active is False and changed(webhook, paused) == {"isActive"}
    delete = operation("webhooks", "delete_webhook")
    assert parsed(delete.sync_detailed(webhook.id, client=client), 204) is None


def run_versions(sdk, client, agent, number, call_id):
    """The agent's versions, one whole, its calls by version, a restore and a pinned number."""
    models = sdk.models
    listed = parsed(
        operation("versions", "list_agent_versions").sync_detailed(agent.id, client=client), 200
    )
    assert [(each.version, each.changes) for each in listed.versions] == [(2, ["name"]), (1, [])]
    assert listed.pagination.total == 2 and listed.versions[0].actor.label
    first = parsed(
        operation("versions", "get_agent_version").sync_detailed(agent.id, 1, client=client), 200
    )
    assert first.agent.name == "Sales" and first.functions == []
    stats = parsed(
        operation("versions", "get_agent_stats").sync_detailed(agent.id, client=client), 200
    )
    [row] = stats.versions
    assert (row.version, row.calls, row.answered, row.billed_minutes) == (2, 1, 1, 2)
    assert row.function_error_rate is None
    by_version = operation("calls", "list_calls").sync_detailed(
        client=client, agent_id=agent.id, agent_version=2
    )
    assert [call.id for call in parsed(by_version, 200).calls] == [call_id]
    restore = operation("versions", "restore_agent_version")
    restored = parsed(restore.sync_detailed(agent.id, 1, client=client), 200)
    assert (restored.version, restored.name) == (3, "Sales")
    assign = operation("phone_numbers", "assign_agent")
    body = models.AssignAgent(agent_id=agent.id, agent_version=2)
    pinned = parsed(assign.sync_detailed(number.id, client=client, body=body), 200)
    assert pinned.agent_version == 2
    return restored


def test_generated_client_runs_every_resource_against_a_real_server(sdk, server, tenant, api_key):
    number = number_service.add_number(actor=ACTOR, tenant=tenant, display_number=DID)
    billing.grant(actor=ACTOR, tenant=tenant, minutes=100)
    client = sdk.AuthenticatedClient(
        base_url=server, token=api_key, raise_on_unexpected_status=True
    )
    with client, Receiver() as receiver:
        agent = run_agents(sdk, client)
        assert run_numbers(sdk, client, agent).id == number.id
        webhook = create_webhook(sdk, client, receiver.url)
        call_id = run_call(server)
        run_calls(sdk, client, call_id, agent)
        agent = run_versions(sdk, client, agent, number, call_id)
        run_usage(sdk, client)
        run_credits(sdk, client)
        wait_until(
            lambda: Delivery.select().where(Delivery.status == "succeeded").count() == 2,
            20,
            "the call's events were not delivered",
        )
        run_events(sdk, client, webhook, call_id)
        wait_until(
            lambda: Delivery.select().where(Delivery.status == "succeeded").count() == 4,
            20,
            "the replayed events were not delivered",
        )
        assert len(receiver.event_ids()) == 2 and len(receiver.requests) == 4
        for delivery in receiver.requests:
            event = parse_delivery(sdk, server, delivery.body)
            assert event.id == delivery.headers["X-Service-Event-Id"]
            assert event.event.value == delivery.json()["event"]
        run_webhooks(sdk, client, webhook)
        run_functions(sdk, client, agent)
        unassign = operation("phone_numbers", "assign_agent").sync_detailed(
            number.id, client=client, body=sdk.models.AssignAgent(agent_id=None)
        )
        assert parsed(unassign, 200).agent_id is None
        delete = operation("agents", "delete_agent")
        assert parsed(delete.sync_detailed(agent.id, client=client), 204) is None
        remaining = operation("agents", "list_agents").sync_detailed(client=client)
        assert parsed(remaining, 200).agents == []
    assert run_the_guides_example(server, api_key) == "['Sales']\n"


def run_the_guides_example(server, api_key) -> str:
    """What the Python example of docs/api.md prints, run against the server with the key."""
    (example,) = re.findall(r"^```python\n(.*?)^```", API_GUIDE.read_text(), re.M | re.S)
    assert "AuthenticatedClient(" in example and 'token="dkl_…"' in example
    code = example.replace("http://127.0.0.1:5000", server).replace("dkl_…", api_key)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(API_GUIDE), "exec"), {})
    return printed.getvalue()
