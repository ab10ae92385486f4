"""Admin CLI through Flask's runner: clear one-line errors with exit code 1."""

import json
import logging
import socket
import uuid
from collections import Counter
from datetime import timedelta

import pytest
from cryptography.fernet import Fernet
from flask import Config
from playhouse.db_url import connect

from app import create_app, db
from app.db import database
from app.models import (
    ApiKey,
    AuditEntry,
    Call,
    CallTurn,
    CreditTransaction,
    Delivery,
    Event,
    PhoneNumber,
    Tenant,
)
from app.services import billing, events
from app.services import keys as key_service
from app.services import tenants as tenant_service
from app.util import isoformat, utcnow
from tests.conftest import RUNTIME_TOKEN, TEST_DATABASE_URL, using_postgres
from tests.helpers import ACTOR
from tests.test_secrets import KEY_SHAPE


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_tenants_create_and_list(runner):
    result = runner.invoke(args=["tenants", "create", "acme", "--plan", "business"])
    assert result.exit_code == 0, result.output
    assert "Created tenant ten_" in result.output
    listed = runner.invoke(args=["tenants", "list"]).output
    assert "acme" in listed and "rate=300/min" in listed


def test_tenants_create_duplicate_fails_cleanly(runner):
    runner.invoke(args=["tenants", "create", "acme"])
    result = runner.invoke(args=["tenants", "create", "acme"])
    assert result.exit_code == 1
    assert result.output.strip() == "Error: A tenant named 'acme' already exists."


def test_tenants_create_enterprise_needs_rate_limit(runner):
    result = runner.invoke(args=["tenants", "create", "big", "--plan", "enterprise"])
    assert result.exit_code == 1 and "--rate-limit" in result.output
    enterprise = ["tenants", "create", "big", "--plan", "enterprise", "--rate-limit", "1000"]
    result = runner.invoke(args=enterprise)
    assert result.exit_code == 1 and "--concurrent-calls" in result.output
    result = runner.invoke(args=[*enterprise, "--concurrent-calls", "150"])
    assert result.exit_code == 0, result.output
    assert "(big, enterprise, 1000/min, 150 calls at once)" in result.output
    assert "rate=1000/min  calls=0/150" in runner.invoke(args=["tenants", "list"]).output


def test_tenants_create_takes_the_plans_concurrent_call_limit(runner):
    result = runner.invoke(args=["tenants", "create", "small"])
    assert "(small, starter, 60/min, 5 calls at once)" in result.output
    result = runner.invoke(args=["tenants", "create", "mid", "--plan", "business"])
    assert "(mid, business, 300/min, 20 calls at once)" in result.output
    result = runner.invoke(args=["tenants", "create", "own", "--concurrent-calls", "8"])
    assert "(own, starter, 60/min, 8 calls at once)" in result.output
    assert Tenant.get(Tenant.name == "own").concurrent_call_limit == 8


def test_tenants_set_plan_sets_the_concurrent_call_limit(runner, tenant):
    args = ["tenants", "set-plan", "--tenant", "acme", "business", "--concurrent-calls", "3"]
    result = runner.invoke(args=args)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "acme is on business, 300/min, 3 calls at once."
    assert Tenant.get_by_id(tenant.id).concurrent_call_limit == 3
    entry = AuditEntry.get(AuditEntry.action == "tenant.plan_changed")
    assert entry.details == {"fields": ["concurrentCallLimit"]}  # what changed, by name
    # Left out, the limit is the plan's again.
    result = runner.invoke(args=["tenants", "set-plan", "--tenant", "acme", "starter"])
    assert result.output.strip() == "acme is on starter, 60/min, 5 calls at once."
    assert Tenant.get_by_id(tenant.id).concurrent_call_limit is None


@pytest.mark.parametrize("calls", ["0", "-1", "99999999999", "many"])
def test_a_concurrent_call_limit_below_one_or_not_a_number_is_refused(runner, tenant, calls):
    result = runner.invoke(
        args=["tenants", "set-plan", "--tenant", "acme", "business", "--concurrent-calls", calls]
    )
    assert result.exit_code in (1, 2)
    assert Tenant.get_by_id(tenant.id).concurrent_call_limit is None


def test_tenants_set_plan_and_threshold(runner, tenant):
    result = runner.invoke(args=["tenants", "set-plan", "--tenant", "acme", "starter"])
    assert result.exit_code == 0 and "60/min" in result.output
    result = runner.invoke(args=["tenants", "set-threshold", "--tenant", tenant.id, "25"])
    assert result.exit_code == 0
    refreshed = Tenant.get_by_id(tenant.id)
    assert (refreshed.plan, refreshed.low_balance_threshold) == ("starter", 25)


def test_keys_create_prints_key_once_and_stores_hash(runner, tenant):
    result = runner.invoke(args=["keys", "create", "--tenant", "acme", "--name", "production"])
    assert result.exit_code == 0, result.output
    key = result.output.strip().splitlines()[-1]
    assert key.startswith("dkl_")
    assert ApiKey.get(ApiKey.tenant == tenant).key_hash == key_service.hash_key(key)
    listed = runner.invoke(args=["keys", "list", "--tenant", "acme"]).output
    assert "production" in listed and key not in listed and key[:12] in listed


def test_keys_revoke(runner, client, tenant):
    record, key = key_service.create_key(actor=ACTOR, tenant=tenant, name="old")
    result = runner.invoke(args=["keys", "revoke", record.id])
    assert result.exit_code == 0
    assert client.get("/api/v1/agents", headers={"x-api-key": key}).status_code == 401
    assert "revoked" in runner.invoke(args=["keys", "list", "--tenant", "acme"]).output


def test_keys_revoke_unknown_fails_cleanly(runner):
    result = runner.invoke(args=["keys", "revoke", "key_nope"])
    assert result.exit_code == 1 and result.output.strip() == "Error: No API key key_nope."


def test_unknown_tenant_fails_cleanly(runner):
    result = runner.invoke(args=["keys", "create", "--tenant", "nobody", "--name", "x"])
    assert result.exit_code == 1
    assert result.output.strip() == "Error: No tenant with id or name 'nobody'."


def test_numbers_add_and_list(runner, tenant):
    result = runner.invoke(
        args=["numbers", "add", "--tenant", "acme", "+6221555010", "--label", "Main"]
    )
    assert result.exit_code == 0, result.output
    listed = runner.invoke(args=["numbers", "list"]).output
    assert "+6221555010" in listed and tenant.id in listed


def test_numbers_add_rejects_bad_and_duplicate_numbers(runner, tenant):
    assert runner.invoke(args=["numbers", "add", "--tenant", "acme", "0812"]).exit_code == 1
    runner.invoke(args=["numbers", "add", "--tenant", "acme", "+6221555010"])
    result = runner.invoke(args=["numbers", "add", "--tenant", "acme", "+6221555010"])
    assert result.exit_code == 1 and "already provisioned" in result.output


def test_credits_grant_writes_purchase_entry(runner, tenant):
    result = runner.invoke(
        args=["credits", "grant", "--tenant", "acme", "--minutes", "120", "--note", "PO 7"]
    )
    assert result.exit_code == 0, result.output
    entry = CreditTransaction.get(CreditTransaction.tenant == tenant)
    assert (entry.type, entry.minutes, entry.balance_after, entry.description) == (
        "purchase",
        120,
        120,
        "PO 7",
    )
    refreshed = Tenant.get_by_id(tenant.id)
    assert refreshed.balance_minutes == 120 and refreshed.lifetime_purchased_minutes == 120


def test_credits_grant_rejects_non_positive(runner, tenant):
    result = runner.invoke(args=["credits", "grant", "--tenant", "acme", "--minutes", "0"])
    assert result.exit_code == 1


def test_demo_is_idempotent_and_prints_working_key(runner, client):
    first = runner.invoke(args=["demo"])
    second = runner.invoke(args=["demo"])
    assert first.exit_code == 0 and second.exit_code == 0, second.output
    key = second.output.split("API key")[1].splitlines()[0].split()[-1]
    agents = client.get("/api/v1/agents", headers={"x-api-key": key}).json["agents"]
    numbers = client.get("/api/v1/phone-numbers", headers={"x-api-key": key}).json
    assert len(agents) == 1
    assert numbers["phoneNumbers"][0]["agentId"] == agents[0]["id"]
    demo = Tenant.get(Tenant.name == "demo")
    assert demo.balance_minutes == 60
    assert CreditTransaction.select().where(CreditTransaction.tenant == demo).count() == 1


def test_demo_again_keeps_the_earlier_demo_key_working(runner, client):
    """A key printed by one make run and exported in a shell still works after the next."""
    first = runner.invoke(args=["demo"])
    second = runner.invoke(args=["demo"])
    keys = [
        result.output.split("API key")[1].splitlines()[0].split()[-1] for result in (first, second)
    ]
    assert keys[0] != keys[1]
    for key in keys:
        assert client.get("/api/v1/agents", headers={"x-api-key": key}).status_code == 200
    assert "(earlier demo keys keep working)" in second.output


def test_db_upgrade_on_migrated_database_is_a_no_op(runner):
    result = runner.invoke(args=["db", "upgrade"])
    assert result.exit_code == 0 and "up to date" in result.output


def test_calls_simulate_drives_a_whole_call(runner, tenant, did):
    result = runner.invoke(
        args=["calls", "simulate", "--did", did, "--seconds", "125", "--transcript", "Booked."]
    )
    assert result.exit_code == 0, result.output
    call = Call.get()
    assert f"Call {call.id}" in result.output
    assert "charged 3 min; balance 97 min" in result.output
    emitted = [line.split()[0] for line in result.output.splitlines() if line.startswith("  ")]
    assert emitted == ["call.started", "call.answered", "call.transcript", "call.ended"]
    assert (call.status, call.transcript_summary, call.billed_minutes) == ("ended", "Booked.", 3)
    # Started a ring and 125 s before the command ran, answered a ring after it started and
    # ended when the command ran: times as long as the call, which has lived them.
    assert (call.answered_at - call.started_at).total_seconds() == 3
    assert (call.ended_at - call.answered_at).total_seconds() == 125
    assert call.ended_at <= utcnow()
    assert (call.duration_seconds, call.talk_time_seconds) == (128, 125)


def test_calls_simulate_with_turns_writes_an_example_conversation(runner, tenant, did):
    args = ["calls", "simulate", "--did", did, "--seconds", "60", "--turns"]
    result = runner.invoke(args=args)
    assert result.exit_code == 0, result.output
    assert "Transcript: 6 turns" in result.output
    call = Call.get()
    turns = list(CallTurn.select().where(CallTurn.call == call).order_by(CallTurn.seq))
    assert [turn.role for turn in turns] == ["agent", "caller"] * 3
    assert [(turn.start_ms, turn.end_ms) for turn in turns[:2]] == [(0, 10_000), (10_000, 20_000)]
    emitted = [line.split()[0] for line in result.output.splitlines() if line.startswith("  ")]
    assert emitted == ["call.started", "call.answered", "call.ended"]  # no summary: no event


def test_calls_simulate_fills_the_variables(runner, tenant, agent_id, did):
    from app.services import agents as agent_service

    agent_service.update_agent(
        actor=ACTOR,
        tenant=tenant,
        agent_id=agent_id,
        system_prompt="Greet {{name}} about {{topic}}.",
    )
    result = runner.invoke(
        args=["calls", "simulate", "--did", did, "--variables", '{"name": "Budi"}']
    )
    assert result.exit_code == 0, result.output
    assert "Placeholders without a value (left as written): topic" in result.output
    assert Call.get().variables == {"name": "Budi"}


@pytest.mark.parametrize("variables", ["[1]", "{bad", '{"1x": "a"}', '{"a": 5}'])
def test_calls_simulate_rejects_bad_variables(runner, did, variables):
    result = runner.invoke(args=["calls", "simulate", "--did", did, "--variables", variables])
    assert result.exit_code == 2 and "--variables" in result.output
    assert Call.select().count() == 0


def test_calls_simulate_reports_a_refused_call(runner, tenant, did):
    tenant_service.set_threshold(actor=ACTOR, tenant=tenant, minutes=0)
    billing.adjust(tenant=tenant, actor=ACTOR, minutes=-100)
    result = runner.invoke(args=["calls", "simulate", "--did", did])
    assert result.exit_code == 1
    assert "no credit minutes left" in result.output
    assert Call.get().hangup_reason == "no_credits"


def test_calls_simulate_unknown_number_fails_cleanly(runner):
    result = runner.invoke(args=["calls", "simulate", "--did", "+6299999999"])
    assert result.exit_code == 1
    assert result.output.strip() == "Error: No tenant has the number +6299999999."


def test_calls_simulate_runs_a_function(runner, client, headers, tenant, agent_id, did):
    from tests.receiver import Answer, Receiver

    with Receiver(lambda request: Answer(body=b'{"open": "09:00"}')) as endpoint:
        client.post(
            f"/api/v1/agents/{agent_id}/functions",
            json={
                "name": "opening_hours",
                "description": "Opening hours.",
                "endpoint": endpoint.url,
                "parameters": {
                    "type": "object",
                    "properties": {"day": {"type": "string", "description": "Day."}},
                },
            },
            headers=headers,
        )
        result = runner.invoke(
            args=[
                "calls",
                "simulate",
                "--did",
                did,
                "--function",
                "opening_hours",
                "--params",
                '{"day": "monday"}',
            ]
        )
    assert result.exit_code == 0, result.output
    assert 'Function opening_hours: {"result": {"open": "09:00"}}' in result.output
    assert "function.called" in result.output
    assert endpoint.requests[0].json()["parameters"] == {"day": "monday"}


def test_calls_simulate_answers_with_the_version_asked_for(runner, tenant, agent_id, did):
    from app.services import agents as agent_service

    agent_service.update_agent(
        actor=ACTOR, tenant=tenant, agent_id=agent_id, system_prompt="Be brief."
    )
    result = runner.invoke(args=["calls", "simulate", "--did", did, "--version", "1"])
    assert result.exit_code == 0, result.output
    call = Call.get()
    assert f"Call {call.id} from +6281234567890 to {did}: agent {agent_id}, version 1" in (
        result.output
    )
    assert call.agent_version == 1
    result = runner.invoke(args=["calls", "simulate", "--did", did])
    assert f"agent {agent_id}, version 2" in result.output


def test_calls_simulate_refuses_a_version_the_agent_lacks(runner, agent_id, did):
    result = runner.invoke(args=["calls", "simulate", "--did", did, "--version", "5"])
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: Agent {agent_id} has no version 5."
    assert Call.select().count() == 0
    result = runner.invoke(args=["calls", "simulate", "--did", did, "--version", "0"])
    assert result.exit_code == 2 and "--version" in result.output


def test_calls_simulate_rejects_bad_params(runner, did):
    result = runner.invoke(args=["calls", "simulate", "--did", did, "--params", "[1]"])
    assert result.exit_code == 2 and "JSON object" in result.output


def one_line_error(result, exit_code: int = 1) -> str:
    """The error a command printed: one "Error: …" line (usage errors add click's usage
    lines above it), no traceback."""
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == exit_code, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    if exit_code == 1:
        assert result.output.strip() == errors[0]
    return errors[0]


def test_keys_revoke_again_says_when_and_keeps_the_time(runner, tenant):
    record, _ = key_service.create_key(actor=ACTOR, tenant=tenant, name="old")
    first = runner.invoke(args=["keys", "revoke", record.id])
    assert first.output.strip() == f"Revoked {record.id} (old)."
    revoked_at = ApiKey.get_by_id(record.id).revoked_at
    again = runner.invoke(args=["keys", "revoke", record.id])
    assert again.exit_code == 0, again.output
    assert again.output.strip() == (
        f"{record.id} (old) was already revoked at {isoformat(revoked_at)}; nothing changed."
    )
    assert ApiKey.get_by_id(record.id).revoked_at == revoked_at


def test_maintenance_prune_refuses_fewer_than_one_day(runner):
    result = runner.invoke(args=["maintenance", "prune", "--days", "0"])
    assert "'--days': 0 is not in the range" in one_line_error(result, exit_code=2)


def test_maintenance_prune_honours_days(runner, tenant):
    old = utcnow() - timedelta(days=3)
    with database.atomic():
        events.emit(tenant_id=tenant.id, type="call.ended", data={"callId": "call_1"})
    Event.update(created_at=old).execute()
    kept = runner.invoke(args=["maintenance", "prune", "--days", "4"])
    assert "and 0 events older than 4 days.\n" in kept.output
    pruned = runner.invoke(args=["maintenance", "prune", "--days", "2"])
    assert "and 1 events older than 2 days.\n" in pruned.output


@pytest.mark.parametrize(
    "args",
    [
        ["credits", "grant", "--tenant", "acme", "--minutes", "99999999999999999999"],
        ["tenants", "set-threshold", "--tenant", "acme", "99999999999"],
        ["tenants", "set-plan", "--tenant", "acme", "enterprise", "--rate-limit", "99999999999"],
        ["calls", "simulate", "--did", "+6221555010", "--seconds", "99999999999"],
        ["maintenance", "prune", "--days", "99999999"],
        ["maintenance", "prune", "--batch-size", "0"],
        ["calls", "simulate", "--did", "+6221555010", "--params", "{bad"],
    ],
)
def test_numbers_out_of_range_and_bad_json_are_usage_errors(runner, tenant, args):
    one_line_error(runner.invoke(args=args), exit_code=2)


@pytest.mark.sqlite_only
def test_db_backup_into_a_missing_folder_fails_cleanly(runner, tmp_path):
    target = tmp_path / "no" / "such" / "x.db"
    error = one_line_error(runner.invoke(args=["db", "backup", str(target)]))
    assert error == f"Error: Cannot write {target}: the folder {target.parent} does not exist."
    assert not target.parent.exists()


@pytest.mark.sqlite_only
def test_db_backup_onto_a_folder_or_nothing_fails_cleanly(runner, tmp_path):
    error = one_line_error(runner.invoke(args=["db", "backup", str(tmp_path)]))
    assert error == f"Error: {tmp_path} is a folder: give the backup's file name."
    error = one_line_error(runner.invoke(args=["db", "backup", ""]))
    assert error == "Error: Give the backup's file name."


@pytest.mark.sqlite_only
def test_db_backup_into_an_unwritable_place_fails_cleanly(runner):
    error = one_line_error(runner.invoke(args=["db", "backup", "/proc/backup.db"]))
    assert error.startswith("Error: Cannot write /proc/backup.db: ")


@pytest.fixture
def empty_database_url(tmp_path):
    """A database without tables: a new SQLite file, or a new PostgreSQL database."""
    if not using_postgres():
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    name = f"va_empty_{uuid.uuid4().hex[:8]}"
    admin = connect(TEST_DATABASE_URL)
    admin.execute_sql(f'CREATE DATABASE "{name}"')
    yield TEST_DATABASE_URL.rsplit("/", 1)[0] + "/" + name
    db.close_all()
    admin.execute_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


def test_commands_on_an_unmigrated_database_say_to_upgrade(app_config, empty_database_url):
    runner = create_app({**app_config, "DATABASE_URL": empty_database_url}).test_cli_runner()
    for args in (
        ["tenants", "list"],
        ["keys", "list", "--tenant", "acme"],
        ["deliveries", "sweep"],
    ):
        error = one_line_error(runner.invoke(args=args))
        assert error.startswith("Error: The database has no tables yet: run flask db upgrade")


@pytest.mark.parametrize(
    "args",
    [
        ["tenants", "list"],
        ["db", "upgrade"],
        ["demo"],
        ["deliveries", "list"],
        ["maintenance", "prune"],
        ["calls", "simulate", "--did", "+6221555010"],
    ],
)
def test_commands_on_an_unreachable_database_fail_cleanly(app_config, args):
    config = {**app_config, "DATABASE_URL": f"postgresql://postgres@127.0.0.1:{closed_port()}/x"}
    runner = create_app(config).test_cli_runner()
    error = one_line_error(runner.invoke(args=args))
    assert error.startswith("Error: The database does not answer: "), error


def test_dev_config_writes_the_development_settings_once(app, runner, tmp_path):
    app.instance_path = str(tmp_path / "instance")
    path = tmp_path / "instance" / "config.py"
    result = runner.invoke(args=["dev", "config"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Wrote the development settings to {path} (")
    written = Config(str(tmp_path))
    written.from_pyfile(str(path))
    assert written["ALLOW_PRIVATE_URLS"] is True
    assert written["RUNTIME_TOKEN"] == "dev-runtime-token"
    assert written["LOG_FORMAT"] == "text"
    assert len(written["SECRET_KEY"]) == 64 and written["SECRET_KEY"] != "change-me"
    Fernet(written["SECRETS_KEY"])  # a usable key for the stored provider secrets
    assert path.stat().st_mode & 0o777 == 0o600  # it holds the secret key
    before = path.read_text()
    again = runner.invoke(args=["dev", "config"])
    assert again.exit_code == 0 and again.output == ""
    assert path.read_text() == before


def test_dev_config_keeps_a_users_file_and_says_what_it_lacks(app, runner, tmp_path):
    app.instance_path = str(tmp_path)
    path = tmp_path / "config.py"
    path.write_text('LOG_LEVEL = "DEBUG"\n')
    result = runner.invoke(args=["dev", "config"])
    assert result.exit_code == 0
    assert result.output.strip() == (
        f"{path} exists and is kept as it is, but does not set ALLOW_PRIVATE_URLS = True and "
        "RUNTIME_TOKEN and SECRETS_KEY: webhooks and functions on 127.0.0.1, the runtime API or "
        "linking WhatsApp accounts will not work until it does."
    )
    assert path.read_text() == 'LOG_LEVEL = "DEBUG"\n'


def test_dev_check_port_passes_a_free_port_silently(runner):
    result = runner.invoke(args=["dev", "check-port", str(closed_port())])
    assert result.exit_code == 0 and result.output == ""


def test_dev_check_port_names_make_run_port_for_a_busy_port(runner):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        error = one_line_error(runner.invoke(args=["dev", "check-port", str(port)]))
    assert error.startswith(
        f"Error: Port {port} on 127.0.0.1 is in use (is make run already serving there?): "
        "stop that server, or serve on another port: make run PORT="
    )
    assert int(error.rsplit("=", 1)[1]) > port


def test_demo_prints_the_runtime_token(runner):
    result = runner.invoke(args=["demo"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == (
        f"Runtime API token (Authorization: Bearer ...): {RUNTIME_TOKEN}"
    )


# Key scope and expiry; the audit log of CLI changes.


def test_keys_create_with_read_scope_and_expiry(runner, client, tenant):
    result = runner.invoke(
        args=[
            "keys",
            *("create", "--tenant", "acme", "--name", "reports"),
            *("--scope", "read", "--expires-in", "90d"),
        ]
    )
    assert result.exit_code == 0, result.output
    key = result.output.strip().splitlines()[-1]
    record = ApiKey.get(ApiKey.tenant == tenant)
    assert record.scope == "read"
    assert abs(record.expires_at - (utcnow() + timedelta(days=90))) < timedelta(minutes=1)
    assert f"(reports, read, expires {isoformat(record.expires_at)})" in result.output
    assert client.get("/api/v1/agents", headers={"x-api-key": key}).status_code == 200
    refused = client.post("/api/v1/agents", json={}, headers={"x-api-key": key})
    assert refused.status_code == 403


def test_keys_create_defaults_to_full_scope_that_never_expires(runner, tenant):
    result = runner.invoke(args=["keys", "create", "--tenant", "acme", "--name", "production"])
    assert "(production, full, never expires)" in result.output
    record = ApiKey.get(ApiKey.tenant == tenant)
    assert (record.scope, record.expires_at) == ("full", None)


@pytest.mark.parametrize("value", ["90", "0d", "-5d", "3w", "d", "90 days", "1234567d", ""])
def test_keys_create_refuses_a_bad_expiry_as_a_usage_error(runner, tenant, value):
    result = runner.invoke(
        args=["keys", "create", "--tenant", "acme", "--name", "x", "--expires-in", value]
    )
    error = one_line_error(result, exit_code=2)
    assert error.startswith("Error: Invalid value for '--expires-in': "), error
    assert "such as 90d" in error
    assert not ApiKey.select().exists()


def test_keys_create_refuses_an_unknown_scope_as_a_usage_error(runner, tenant):
    result = runner.invoke(
        args=["keys", "create", "--tenant", "acme", "--name", "x", "--scope", "write"]
    )
    assert "'--scope'" in one_line_error(result, exit_code=2)


def test_keys_list_shows_scope_expiry_last_use_and_state(runner, client, tenant):
    full, full_key = key_service.create_key(actor=ACTOR, tenant=tenant, name="prod")
    read, _ = key_service.create_key(
        actor=ACTOR, tenant=tenant, name="reports", scope="read", expires_in_days=30
    )
    gone, _ = key_service.create_key(actor=ACTOR, tenant=tenant, name="temp", expires_in_days=1)
    ApiKey.update(expires_at=utcnow() - timedelta(hours=1)).where(ApiKey.id == gone.id).execute()
    old, _ = key_service.create_key(actor=ACTOR, tenant=tenant, name="old")
    key_service.revoke_key(actor=ACTOR, key_id=old.id)
    client.get("/api/v1/agents", headers={"x-api-key": full_key})
    lines = {
        line.split()[0]: line
        for line in runner.invoke(args=["keys", "list", "--tenant", "acme"]).output.splitlines()
    }
    used = ApiKey.get_by_id(full.id).last_used_at
    assert lines[full.id].endswith(
        f"scope=full  created {isoformat(full.created_at)}  expires never"
        f"  last used {isoformat(used)}  active"
    )
    assert f"scope=read  created {isoformat(read.created_at)}" in lines[read.id]
    assert f"expires {isoformat(read.expires_at)}  last used never  active" in lines[read.id]
    assert lines[gone.id].endswith("last used never  expired")
    revoked_at = ApiKey.get_by_id(old.id).revoked_at
    assert lines[old.id].endswith(f"last used never  revoked {isoformat(revoked_at)}")


def audit_entries(tenant):
    """The entries of the changes made from the command line (not the test's own setup)."""
    return list(
        AuditEntry.select()
        .where((AuditEntry.tenant == tenant.id) & (AuditEntry.actor_type == "cli"))
        .order_by(AuditEntry.created_at, AuditEntry.id)
    )


@pytest.fixture
def delivery_id(client, headers, tenant):
    """A failed delivery of an active webhook (nothing listens at its URL)."""
    webhook = client.post(
        "/api/v1/webhooks",
        json={"url": "http://127.0.0.1:9/in", "events": ["call.ended"], "secret": "s" * 24},
        headers=headers,
    ).json
    with database.atomic():
        events.emit(tenant_id=tenant.id, type="call.ended", data={"callId": "call_1"})
    delivery = Delivery.get(Delivery.webhook == webhook["id"])
    Delivery.update(status="failed").where(Delivery.id == delivery.id).execute()
    return delivery.id


@pytest.mark.parametrize(
    ("args", "action", "details"),
    [
        (
            ["tenants", "set-plan", "--tenant", "acme", "starter"],
            "tenant.plan_changed",
            {"fields": ["plan"]},
        ),
        (
            ["tenants", "set-threshold", "--tenant", "acme", "25"],
            "tenant.threshold_changed",
            {"fields": ["lowBalanceThresholdMinutes"]},
        ),
        (
            ["numbers", "add", "--tenant", "acme", "+6221555010", "--label", "Main"],
            "number.added",
            {},
        ),
        (
            ["credits", "grant", "--tenant", "acme", "--minutes", "120", "--note", "PO 7"],
            "credits.granted",
            {},
        ),
    ],
    ids=lambda value: value[1] if isinstance(value, list) else None,
)
def test_cli_changes_are_written_to_the_audit_log(runner, tenant, args, action, details):
    result = runner.invoke(args=args)
    assert result.exit_code == 0, result.output
    [entry] = audit_entries(tenant)
    assert (entry.action, entry.actor_type, entry.actor_label, entry.actor_id) == (
        action,
        "cli",
        "CLI",
        None,
    )
    target = {
        "number.added": lambda: PhoneNumber.get().id,
        "credits.granted": lambda: CreditTransaction.get().id,
    }.get(action, lambda: tenant.id)()
    assert entry.target_id == target
    assert entry.details == details


def test_tenants_create_is_the_first_entry_of_its_audit_log(runner):
    runner.invoke(args=["tenants", "create", "acme", "--plan", "business"])
    tenant = Tenant.get(Tenant.name == "acme")
    [entry] = audit_entries(tenant)
    assert (entry.action, entry.target_id, entry.details) == ("tenant.created", tenant.id, {})


def test_keys_create_and_revoke_are_audited_without_the_key(runner, tenant, caplog):
    caplog.set_level(logging.DEBUG)
    created = runner.invoke(
        args=["keys", "create", "--tenant", "acme", "--name", "ci", "--expires-in", "30d"]
    )
    key = created.output.strip().splitlines()[-1]
    record = ApiKey.get(ApiKey.tenant == tenant)
    runner.invoke(args=["keys", "revoke", record.id])
    runner.invoke(args=["keys", "revoke", record.id])  # already revoked: nothing changes
    made, revoked = audit_entries(tenant)
    assert (made.action, made.target_id, made.details) == (
        "key.created",
        record.id,
        {"name": "ci", "scope": "full"},
    )
    assert (revoked.action, revoked.target_id, revoked.details) == ("key.revoked", record.id, {})
    stored = json.dumps(list(AuditEntry.select().dicts()), default=str)
    assert key not in stored and key not in caplog.text
    assert KEY_SHAPE.search(stored) is None


def test_deliveries_retry_is_audited(runner, tenant, delivery_id):
    result = runner.invoke(args=["deliveries", "retry", delivery_id])
    assert result.exit_code == 0, result.output
    [entry] = [entry for entry in audit_entries(tenant) if entry.action == "delivery.retried"]
    assert entry.target_id == delivery_id
    assert entry.details == {"webhookId": Delivery.get_by_id(delivery_id).webhook_id}


def test_a_failed_cli_change_writes_no_audit_entry(runner, tenant):
    runner.invoke(args=["numbers", "add", "--tenant", "acme", "+6221555010"])
    result = runner.invoke(args=["numbers", "add", "--tenant", "acme", "+6221555010"])
    assert result.exit_code == 1
    assert [entry.action for entry in audit_entries(tenant)] == ["number.added"]


def test_demo_writes_its_changes_to_the_audit_log(runner):
    runner.invoke(args=["demo"])
    runner.invoke(args=["demo"])
    demo = Tenant.get(Tenant.name == "demo")
    actions = Counter(entry.action for entry in audit_entries(demo))
    assert actions == {
        "tenant.created": 1,
        "credits.granted": 1,
        "agent.created": 1,
        "number.added": 1,
        "number.assigned": 1,
        "key.created": 2,
        "user.created": 1,
        "user.password_set": 1,
    }
