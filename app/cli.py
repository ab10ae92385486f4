"""Admin CLI: flask tenants / keys / users / numbers / credits / db / deliveries / demo.

Thin wrappers over services."""

import errno
import json
import os
import random
import re
import secrets
import sys
import time
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import click
import peewee
from flask import Flask, current_app
from flask.cli import AppGroup
from marshmallow import ValidationError
from redis import RedisError

from app import db, development, jobs, queue
from app.errors import AppError
from app.models import Event, Tenant
from app.resources.fields import MAX_INT32
from app.runtime.schemas import MAX_CALL_SECONDS, Variables
from app.services import agents as agent_service
from app.services import billing, function_calls, maintenance
from app.services import deliveries as delivery_service
from app.services import keys as key_service
from app.services import phone_numbers as number_service
from app.services import tenants as tenant_service
from app.services import users as user_service
from app.services.audit import Actor
from app.services.calls import constants as call_constants
from app.services.calls import lifecycle as call_lifecycle
from app.services.calls import outbound as outbound_calls
from app.util import isoformat, utcnow

tenants_cli = AppGroup("tenants", help="Create and manage tenants.")
keys_cli = AppGroup("keys", help="Create, list and revoke API keys.")
numbers_cli = AppGroup("numbers", help="Provision phone numbers.")
credits_cli = AppGroup("credits", help="Grant credit minutes.")
db_cli = AppGroup("db", help="Database schema and backups.")
maintenance_cli = AppGroup("maintenance", help="Housekeeping of old data.")
calls_cli = AppGroup("calls", help="Drive calls by hand, as the voice runtime would.")
deliveries_cli = AppGroup("deliveries", help="Inspect, sweep and retry webhook deliveries.")
dev_cli = AppGroup("dev", help="Development setup (make run uses these).")
users_cli = AppGroup("users", help="Dashboard users: create, list, set passwords, disable.")

MAX_RETENTION_DAYS = 36_500  # a century: beyond it the cutoff date would not exist


# SQLite's and PostgreSQL's words for a table that is not there.
MISSING_TABLE = re.compile(r"no such table|relation \S+ does not exist")


def first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


def user_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn what a user can cause or meet into a one-line message with exit code 1: domain
    errors, a database that does not answer or has no tables yet, an unreachable Redis."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except AppError as exc:
            raise click.ClickException(exc.message) from None
        except (peewee.OperationalError, peewee.ProgrammingError, peewee.InterfaceError) as exc:
            reason = first_line(exc)
            if MISSING_TABLE.search(reason):
                message = f"The database has no tables yet: run flask db upgrade ({reason})."
            else:
                message = f"The database does not answer: {reason}"
            raise click.ClickException(message) from None
        except RedisError as exc:
            raise click.ClickException(f"Redis does not answer: {first_line(exc)}") from None

    return wrapper


tenant_option = click.option("--tenant", "tenant_ref", required=True, help="Tenant id or name.")
# Who the changes made from the command line are by, in the audit log.
CLI = Actor.cli()


class Days(click.ParamType):
    """A number of days written Nd, e.g. 90d."""

    name = "Nd"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        match = re.fullmatch(r"([0-9]{1,6})d", str(value).strip())
        days = int(match.group(1)) if match else 0
        if not 1 <= days <= key_service.MAX_EXPIRY_DAYS:
            self.fail(
                f"{value!r} is not a number of days from 1d to {key_service.MAX_EXPIRY_DAYS}d, "
                "such as 90d.",
                param,
                ctx,
            )
        return days


rate_limit_option = click.option(
    "--rate-limit",
    type=click.IntRange(max=MAX_INT32),
    help="Requests per minute (required for enterprise; default: the plan's).",
)
concurrent_calls_option = click.option(
    "--concurrent-calls",
    type=click.IntRange(max=MAX_INT32),
    help="Calls in progress at once (required for enterprise; default: the plan's, starter "
    f"{tenant_service.PLAN_CONCURRENT_CALLS['starter']}, business "
    f"{tenant_service.PLAN_CONCURRENT_CALLS['business']}).",
)


def plan_summary(tenant: Tenant) -> str:
    return (
        f"{tenant.plan}, {tenant_service.rate_limit_of(tenant)}/min, "
        f"{tenant_service.concurrent_call_limit_of(tenant)} calls at once"
    )


@tenants_cli.command("create")
@click.argument("name")
@click.option(
    "--plan",
    type=click.Choice(list(tenant_service.PLAN_LIMITS)),
    default="starter",
    show_default=True,
)
@rate_limit_option
@concurrent_calls_option
@user_errors
def tenants_create(
    name: str, plan: str, rate_limit: int | None, concurrent_calls: int | None
) -> None:
    """Create a tenant."""
    tenant = tenant_service.create_tenant(
        actor=CLI, name=name, plan=plan, rate_limit=rate_limit, concurrent_calls=concurrent_calls
    )
    click.echo(f"Created tenant {tenant.id} ({tenant.name}, {plan_summary(tenant)}).")


@tenants_cli.command("list")
@user_errors
def tenants_list() -> None:
    """List tenants."""
    for tenant in tenant_service.list_tenants():
        limit = tenant_service.rate_limit_of(tenant)
        calls = tenant_service.concurrent_call_limit_of(tenant)
        click.echo(
            f"{tenant.id}  {tenant.name}  plan={tenant.plan}  rate={limit}/min  "
            f"calls={tenant.active_calls}/{calls}  "
            f"balance={tenant.balance_minutes}min  threshold={tenant.low_balance_threshold}min"
        )


@tenants_cli.command("set-plan")
@tenant_option
@click.argument("plan", type=click.Choice(list(tenant_service.PLAN_LIMITS)))
@rate_limit_option
@concurrent_calls_option
@user_errors
def tenants_set_plan(
    tenant_ref: str, plan: str, rate_limit: int | None, concurrent_calls: int | None
) -> None:
    """Change a tenant's plan and limits (a limit left out is the plan's); the rate limit
    holds from the next request, the concurrent-call limit from the next call's start."""
    tenant = tenant_service.set_plan(
        tenant=tenant_service.find_tenant(tenant_ref),
        actor=CLI,
        plan=plan,
        rate_limit=rate_limit,
        concurrent_calls=concurrent_calls,
    )
    click.echo(f"{tenant.name} is on {plan_summary(tenant)}.")


@tenants_cli.command("set-threshold")
@tenant_option
@click.argument("minutes", type=click.IntRange(max=MAX_INT32))
@user_errors
def tenants_set_threshold(tenant_ref: str, minutes: int) -> None:
    """Set the balance (minutes) below which credits.low fires."""
    tenant = tenant_service.set_threshold(
        tenant=tenant_service.find_tenant(tenant_ref), actor=CLI, minutes=minutes
    )
    click.echo(f"{tenant.name}: credits.low fires below {minutes} minutes.")


@keys_cli.command("create")
@tenant_option
@click.option("--name", required=True, help="What the key is for, e.g. production.")
@click.option(
    "--scope",
    type=click.Choice(key_service.SCOPES),
    default="full",
    show_default=True,
    help="full, or read: the key may only read (GET).",
)
@click.option(
    "--expires-in",
    "expires_in_days",
    type=Days(),
    default=None,
    help="Days until the key stops working, e.g. 90d (default: never).",
)
@user_errors
def keys_create(tenant_ref: str, name: str, scope: str, expires_in_days: int | None) -> None:
    """Create an API key and print it once."""
    tenant = tenant_service.find_tenant(tenant_ref)
    record, key = key_service.create_key(
        tenant=tenant, actor=CLI, name=name, scope=scope, expires_in_days=expires_in_days
    )
    expiry = f"expires {isoformat(record.expires_at)}" if record.expires_at else "never expires"
    click.echo(
        f"Created key {record.id} ({name}, {scope}, {expiry}) for {tenant.name}. "
        "It is shown only once:"
    )
    click.echo(key)


def read_password(from_stdin: bool) -> str:
    """The new password: one line on stdin, or asked for twice at the terminal."""
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    return click.prompt("Password", hide_input=True, confirmation_prompt=True)


password_stdin_option = click.option(
    "--password-stdin", is_flag=True, help="Read the password from one line of stdin."
)


@users_cli.command("create")
@tenant_option
@click.option("--email", required=True, help="The user's email; they sign in with it.")
@click.option(
    "--role",
    type=click.Choice(user_service.ROLES),
    default="viewer",
    show_default=True,
    help="owner: everything, users too; admin: all but users; viewer: reads only.",
)
@password_stdin_option
@user_errors
def users_create(tenant_ref: str, email: str, role: str, password_stdin: bool) -> None:
    """Create a dashboard user of a tenant (asks for the password)."""
    tenant = tenant_service.find_tenant(tenant_ref)
    password = read_password(password_stdin)
    user = user_service.create_user(
        tenant=tenant, actor=CLI, email=email, password=password, role=role
    )
    click.echo(f"Created {user.role} {user.email} ({user.id}) of {tenant.name}.")


@users_cli.command("list")
@click.option("--tenant", "tenant_ref", help="Only this tenant's users (id or name).")
@user_errors
def users_list(tenant_ref: str | None) -> None:
    """List dashboard users (never their passwords)."""
    tenant = tenant_service.find_tenant(tenant_ref) if tenant_ref else None
    for user in user_service.list_users(tenant=tenant):
        state = f"disabled {isoformat(user.disabled_at)}" if user.disabled_at else "active"
        signed_in = isoformat(user.last_sign_in_at) or "never"
        click.echo(
            f"{user.id}  {user.email}  {user.role}  tenant {user.tenant_id}"
            f"  last sign-in {signed_in}  {state}"
        )


@users_cli.command("set-password")
@click.option("--email", required=True)
@password_stdin_option
@user_errors
def users_set_password(email: str, password_stdin: bool) -> None:
    """Set a user's password; their other sessions end."""
    user = user_service.find_user(email)
    password = read_password(password_stdin)
    user = user_service.set_password(user=user, actor=CLI, password=password)
    click.echo(f"New password set for {user.email}; their sessions have ended.")


@users_cli.command("disable")
@click.option("--email", required=True)
@user_errors
def users_disable(email: str) -> None:
    """Disable a user: they cannot sign in, and their sessions end."""
    user, changed = user_service.disable(user=user_service.find_user(email), actor=CLI)
    if changed:
        click.echo(f"Disabled {user.email}; their sessions have ended.")
    else:
        click.echo(f"{user.email} was already disabled at {isoformat(user.disabled_at)}.")


@users_cli.command("enable")
@click.option("--email", required=True)
@user_errors
def users_enable(email: str) -> None:
    """Enable a disabled user: they can sign in again, with the password they had."""
    user, changed = user_service.enable(user=user_service.find_user(email), actor=CLI)
    if changed:
        click.echo(f"Enabled {user.email}: they can sign in again.")
    else:
        click.echo(f"{user.email} is not disabled.")


@keys_cli.command("list")
@tenant_option
@user_errors
def keys_list(tenant_ref: str) -> None:
    """List a tenant's keys (never the keys themselves)."""
    tenant = tenant_service.find_tenant(tenant_ref)
    now = utcnow()
    for record in key_service.list_keys(tenant=tenant):
        state = key_service.state(record, now)
        if state == "revoked":
            state = f"revoked {isoformat(record.revoked_at)}"
        click.echo(
            f"{record.id}  {record.name}  {record.prefix}…  scope={record.scope}"
            f"  created {isoformat(record.created_at)}"
            f"  expires {isoformat(record.expires_at) or 'never'}"
            f"  last used {isoformat(record.last_used_at) or 'never'}  {state}"
        )


@keys_cli.command("revoke")
@click.argument("key_id")
@user_errors
def keys_revoke(key_id: str) -> None:
    """Revoke a key; effective on the next request."""
    record, revoked = key_service.revoke_key(key_id=key_id, actor=CLI)
    if revoked:
        click.echo(f"Revoked {record.id} ({record.name}).")
    else:
        click.echo(
            f"{record.id} ({record.name}) was already revoked at "
            f"{isoformat(record.revoked_at)}; nothing changed."
        )


@numbers_cli.command("add")
@tenant_option
@click.argument("number")
@click.option("--label", default="", help="Free-text label.")
@user_errors
def numbers_add(tenant_ref: str, number: str, label: str) -> None:
    """Provision a phone number (E.164, e.g. +6221555010) for a tenant."""
    tenant = tenant_service.find_tenant(tenant_ref)
    record = number_service.add_number(tenant=tenant, actor=CLI, display_number=number, label=label)
    click.echo(f"Added {record.id} {record.display_number} for {tenant.name}.")


@numbers_cli.command("list")
@click.option("--tenant", "tenant_ref", help="Only this tenant's numbers (id or name).")
@user_errors
def numbers_list(tenant_ref: str | None) -> None:
    """List phone numbers."""
    tenant = tenant_service.find_tenant(tenant_ref) if tenant_ref else None
    for record in number_service.list_numbers(tenant=tenant):
        click.echo(
            f"{record.id}  {record.display_number}  tenant={record.tenant_id}  "
            f"agent={record.agent_id or '-'}  {record.label}"
        )


@credits_cli.command("grant")
@tenant_option
@click.option(
    "--minutes", type=click.IntRange(max=MAX_INT32), required=True, help="Minutes to add."
)
@click.option("--note", default="", help="Ledger description.")
@user_errors
def credits_grant(tenant_ref: str, minutes: int, note: str) -> None:
    """Add purchased minutes (a purchase ledger entry)."""
    tenant = tenant_service.find_tenant(tenant_ref)
    entry = billing.grant(tenant=tenant, actor=CLI, minutes=minutes, note=note)
    click.echo(f"Granted {minutes} minutes to {tenant.name}; balance {entry.balance_after}.")


@db_cli.command("upgrade")
@user_errors
def db_upgrade() -> None:
    """Apply pending schema migrations."""
    applied = db.upgrade()
    click.echo(f"Applied {', '.join(applied)}." if applied else "The schema is up to date.")


@db_cli.command("backup")
@click.argument("path")
@user_errors
def db_backup(path: str) -> None:
    """Copy the SQLite database to PATH, consistently, while the service runs."""
    result = maintenance.backup_sqlite(target=path)
    click.echo(f"Backed up {result['tables']} tables ({result['bytes']} bytes) to {path}.")


@maintenance_cli.command("prune")
@click.option(
    "--days",
    type=click.IntRange(1, MAX_RETENTION_DAYS),
    default=None,
    help="Keep this many days, at least 1 (default: RETENTION_DAYS, 30).",
)
@click.option("--batch-size", type=click.IntRange(min=1), default=500, show_default=True)
@user_errors
def maintenance_prune(days: int | None, batch_size: int) -> None:
    """Delete delivery attempts and finished events older than the retention, idempotency
    keys older than 24 hours and dashboard sessions older than a week."""
    if days is None:
        days = current_app.config["RETENTION_DAYS"]
    counts = maintenance.prune(older_than_days=days, batch_size=batch_size)
    click.echo(
        f"Deleted {counts['attempts']} delivery attempts, {counts['deliveries']} deliveries "
        f"and {counts['events']} events older than {days} days."
    )
    click.echo(f"Deleted {counts['keys']} idempotency keys older than 24 hours.")
    click.echo(f"Deleted {counts['sessions']} dashboard sessions older than a week.")


# The short conversation `calls simulate --turns` reports.
EXAMPLE_TURNS = (
    ("agent", "Halo, terima kasih sudah menelepon. Ada yang bisa saya bantu?"),
    ("caller", "Halo, saya mau buat janji dengan dokter gigi untuk besok."),
    ("agent", "Baik. Besok ada jadwal jam 10.00 dan jam 14.30. Mau yang mana?"),
    ("caller", "Jam 10 saja."),
    ("agent", "Sudah saya catat: besok jam 10.00 dengan dokter gigi. Ada lagi?"),
    ("caller", "Tidak, terima kasih."),
)


def example_turns(seconds: int) -> list[dict[str, Any]]:
    """EXAMPLE_TURNS spread evenly over seconds of conversation."""
    span = seconds * 1000 // len(EXAMPLE_TURNS)
    return [
        {"role": role, "text": text, "start_ms": index * span, "end_ms": (index + 1) * span}
        for index, (role, text) in enumerate(EXAMPLE_TURNS)
    ]


def json_object(value: str, option: str) -> dict[str, Any]:
    try:
        loaded = json.loads(value)
    except ValueError:
        raise click.BadParameter("must be a JSON object", param_hint=option) from None
    if not isinstance(loaded, dict):
        raise click.BadParameter("must be a JSON object", param_hint=option)
    return loaded


@calls_cli.command("simulate")
@click.option("--did", required=True, help="The business number called, e.g. +6221555010.")
@click.option("--caller", default="+6281234567890", show_default=True, help="Caller's number.")
@click.option("--seconds", type=click.IntRange(0, MAX_CALL_SECONDS), default=60, show_default=True)
@click.option("--transcript", default=None, help="A transcript summary to report.")
@click.option(
    "--turns", is_flag=True, help="Report a short example conversation as transcript turns."
)
@click.option(
    "--variables",
    default="{}",
    show_default=True,
    help='Values for the agent\'s {{name}} placeholders, as a JSON object: {"name": "Budi"}.',
)
@click.option("--function", "function_name", default=None, help="A function for the AI to call.")
@click.option("--params", default="{}", show_default=True, help="Its parameters, as JSON.")
@click.option(
    "--version",
    "agent_version",
    type=click.IntRange(1, MAX_INT32),
    default=None,
    help="Answer with this version of the number's agent (default: the number's pinned "
    "version, else the agent's latest).",
)
@user_errors
def calls_simulate(
    did: str,
    caller: str,
    seconds: int,
    transcript: str | None,
    turns: bool,
    variables: str,
    function_name: str | None,
    params: str,
    agent_version: int | None,
) -> None:
    """Run a whole call (start, answer, function call, transcript, end) as the runtime would."""
    parameters = json_object(params, "--params")
    try:
        values = Variables().deserialize(json_object(variables, "--variables"))
    except ValidationError as exc:
        raise click.BadParameter(json.dumps(exc.messages), param_hint="--variables") from None
    since = utcnow()
    started = call_lifecycle.start_call(
        did=did, caller_number=caller, variables=values, agent_version=agent_version
    )
    call = started.call
    click.echo(
        f"Call {call.id} from {caller} to {did}: agent {call.agent_id}, version "
        f"{call.agent_version}"
    )
    missing = started.session["missing_variables"]
    if missing:
        click.echo(f"Placeholders without a value (left as written): {', '.join(missing)}")
    call_lifecycle.answer_call(call_id=call.id)
    if function_name:
        outcome = function_calls.invoke(
            call_id=call.id, function_name=function_name, parameters=parameters
        )
        click.echo(f"Function {function_name}: {json.dumps(outcome.as_dict())}")
    if turns:
        call_lifecycle.add_transcript(call_id=call.id, turns=example_turns(seconds))
        click.echo(f"Transcript: {len(EXAMPLE_TURNS)} turns")
    if transcript:
        call_lifecycle.add_transcript(call_id=call.id, transcript_summary=transcript)
    call = call_lifecycle.end_call(
        call_id=call.id,
        status="ended",
        duration_seconds=seconds,
        talk_time_seconds=seconds,
        hangup_reason="normal",
        hangup_initiator="caller",
        ai_cost_idr=0,
    )
    balance = billing.get_balance(tenant=call.tenant).balance_minutes
    click.echo(f"Ended after {seconds} s: charged {call.billed_minutes} min; balance {balance} min")
    emitted = (
        Event.select()
        .where((Event.tenant == call.tenant_id) & (Event.created_at >= since))
        .order_by(Event.created_at)
    )
    for event in emitted:
        if event.data.get("callId", call.id) == call.id:
            click.echo(f"  {event.type} {event.id}")


# The outcomes of an unanswered call the demo runtime reports (its hangupReason).
DEMO_UNANSWERED = ("no_answer", "busy")
DEMO_RING_SECONDS = 3


@calls_cli.command("dispatch-demo")
@click.option(
    "--max-calls",
    type=click.IntRange(1, call_constants.MAX_DISPATCH),
    default=5,
    show_default=True,
    help="Calls in progress at once.",
)
@click.option(
    "--seconds",
    type=click.IntRange(0, 3600),
    default=8,
    show_default=True,
    help="How long an answered call talks, in real seconds.",
)
@click.option(
    "--answer-rate",
    type=click.FloatRange(0, 1),
    default=0.8,
    show_default=True,
    help="The share of calls answered; the others end busy or unanswered.",
)
@click.option(
    "--interval",
    type=click.FloatRange(0.05, 60),
    default=1.0,
    show_default=True,
    help="Seconds between two claims.",
)
@click.option("--once", is_flag=True, help="Stop when no call is queued or in progress.")
@click.option("--seed", type=int, default=None, help="Make the outcomes repeatable.")
@user_errors
def calls_dispatch_demo(
    max_calls: int, seconds: int, answer_rate: float, interval: float, once: bool, seed: int | None
) -> None:
    """Play the voice runtime's part for queued outbound calls (a campaign's, say): claim them
    as a runtime does (dispatch), answer or not, talk, end. Stop with Ctrl+C."""
    outcomes = random.Random(seed)
    talking: dict[str, float] = {}  # call id: when it hangs up (time.monotonic())
    while True:
        room = max_calls - len(talking)
        for started in outbound_calls.dispatch(max_calls=room) if room else []:
            call = started.call
            if outcomes.random() >= answer_rate:
                reason = outcomes.choice(DEMO_UNANSWERED)
                call_lifecycle.end_call(
                    call_id=call.id,
                    status="failed",
                    duration_seconds=DEMO_RING_SECONDS,
                    talk_time_seconds=0,
                    hangup_reason=reason,
                    hangup_initiator="callee",
                    ai_cost_idr=0,
                )
                click.echo(f"{call.id} to {call.callee_number}: {reason}")
                continue
            call_lifecycle.answer_call(call_id=call.id)
            talking[call.id] = time.monotonic() + seconds
            click.echo(f"{call.id} to {call.callee_number}: answered")
        for call_id, hangs_up in list(talking.items()):
            if hangs_up > time.monotonic():
                continue
            call_lifecycle.add_transcript(
                call_id=call_id,
                turns=example_turns(max(seconds, 1)),
                transcript_summary="A demo call: the callee confirmed the appointment.",
            )
            call_lifecycle.end_call(
                call_id=call_id,
                status="ended",
                duration_seconds=seconds + DEMO_RING_SECONDS,
                talk_time_seconds=seconds,
                hangup_reason="normal",
                hangup_initiator="caller",
                ai_cost_idr=0,
            )
            del talking[call_id]
            click.echo(f"{call_id}: ended after {seconds} s")
        if once and not talking and not outbound_calls.has_queued():
            return
        time.sleep(interval)


@deliveries_cli.command("sweep")
@user_errors
def deliveries_sweep() -> None:
    """Enqueue every due delivery that no job holds, release the credit holds of calls that
    never ended and place the campaigns' due calls (the worker does this every few seconds)."""
    count = jobs.sweep()
    click.echo(f"Enqueued {count} due deliveries.")


@deliveries_cli.command("list")
@click.option("--tenant", "tenant_ref", help="Only this tenant's deliveries (id or name).")
@click.option("--status", type=click.Choice(delivery_service.STATUSES), help="Only this status.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@user_errors
def deliveries_list(tenant_ref: str | None, status: str | None, limit: int) -> None:
    """List deliveries, newest first."""
    tenant = tenant_service.find_tenant(tenant_ref) if tenant_ref else None
    page = delivery_service.list_deliveries(tenant=tenant, status=status, limit=limit)
    for delivery in page.items:
        due = (
            f"  next {isoformat(delivery.next_attempt_at)}" if delivery.status == "pending" else ""
        )
        click.echo(
            f"{delivery.id}  {delivery.event.type}  {delivery.status}  "
            f"attempts={delivery.attempts}  last={delivery.last_status_code or '-'}  "
            f"webhook={delivery.webhook_id}  tenant={delivery.tenant_id}  "
            f"created {isoformat(delivery.created_at)}{due}"
            + (f"  error: {delivery.last_error}" if delivery.last_error else "")
        )
    click.echo(f"{len(page.items)} of {page.total} deliveries.")


@deliveries_cli.command("retry")
@click.argument("delivery_id")
@user_errors
def deliveries_retry(delivery_id: str) -> None:
    """Send a delivery again now, whatever its status, and say what the attempt did."""
    attempts = delivery_service.get_delivery(tenant=None, delivery_id=delivery_id).attempts
    # The attempt is enqueued (or made, inline) once the retry commits.
    delivery = delivery_service.retry(tenant=None, actor=CLI, delivery_id=delivery_id)
    if not queue.inline():  # a worker makes the attempt
        delivery = delivery_service.get_delivery(tenant=None, delivery_id=delivery.id)
        if delivery.job_id is None:  # the tenant's places are taken: it waits its turn
            click.echo(
                f"{delivery.id} is due now and waits for a place: its webhook or tenant has "
                "as many deliveries in flight as it may. worker.py webhooks sends it when one "
                "frees, and flask deliveries list shows the outcome."
            )
            return
        if not queue.known(delivery.job_id):
            raise click.ClickException(
                f"Could not queue {delivery.id}: Redis does not answer. It is due now, and the "
                "sweeper of worker.py webhooks sends it once Redis answers."
            )
        click.echo(
            f"Queued {delivery.id} for another attempt (job {delivery.job_id}): worker.py "
            "webhooks sends it, and flask deliveries list shows the outcome."
        )
        return
    # Inline mode made the attempt in this process when retry() committed.
    delivery = delivery_service.get_delivery(tenant=None, delivery_id=delivery.id)
    attempt = delivery_service.last_attempt(delivery) if delivery.attempts > attempts else None
    if attempt is None:
        click.echo(
            f"Another process is attempting {delivery.id} now; flask deliveries list shows "
            "the outcome."
        )
    elif delivery.status == "succeeded":
        click.echo(
            f"Delivered {delivery.id} (HTTP {attempt.status_code} in {attempt.duration_ms} ms)."
        )
    elif delivery.status == "pending":
        click.echo(
            f"Attempt {attempt.number} of {delivery.id} failed: {attempt.error} "
            f"Next attempt at {isoformat(delivery.next_attempt_at)}."
        )
    else:
        click.echo(
            f"Attempt {attempt.number} of {delivery.id} failed: {attempt.error} "
            "No attempts are left: it has failed."
        )


@dev_cli.command("config")
def dev_config() -> None:
    """Write the development settings to instance/config.py, unless that file exists."""
    path = Path(current_app.instance_path) / "config.py"
    shown = os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)
    if development.write_config(path):
        click.echo(
            f"Wrote the development settings to {shown} (ALLOW_PRIVATE_URLS, RUNTIME_TOKEN, "
            "LOG_FORMAT, SECRET_KEY, SESSION_COOKIE_SECURE): the server and every flask command "
            "read them."
        )
        return
    missing = development.missing_settings(path)
    if missing:
        click.echo(
            f"{shown} exists and is kept as it is, but does not set {' and '.join(missing)}: "
            "webhooks and functions on 127.0.0.1 or the runtime API will not work until it does.",
            err=True,
        )


@dev_cli.command("check-port")
@click.argument("port", type=click.IntRange(1, 65535))
@click.option("--host", default="127.0.0.1", show_default=True)
def dev_check_port(port: int, host: str) -> None:
    """Fail with one line when a server could not listen on HOST:PORT now."""
    reason = development.cannot_listen(host, port)
    if reason is None:
        return
    other = development.free_port_after(host, port)
    hint = f"make run PORT={other}" if other else "make run PORT=<another port>"
    if reason.errno == errno.EADDRINUSE:
        raise click.ClickException(
            f"Port {port} on {host} is in use (is make run already serving there?): stop that "
            f"server, or serve on another port: {hint}"
        )
    raise click.ClickException(
        f"Cannot serve on {host}:{port} ({reason.strerror or reason}): choose another port: {hint}"
    )


DEMO_TENANT = "demo"
DEMO_NUMBER = "+6221555010"
DEMO_OWNER = "owner@demo.test"


def demo_owner_password(tenant: Any) -> str:
    """A new password for the demo tenant's owner (created the first time); the password."""
    password = secrets.token_urlsafe(12)
    try:
        owner = user_service.find_user(DEMO_OWNER)
    except AppError:
        user_service.create_user(
            tenant=tenant, actor=CLI, email=DEMO_OWNER, password=password, role="owner"
        )
    else:
        user_service.set_password(user=owner, actor=CLI, password=password)
    return password


@click.command("demo")
@user_errors
def demo() -> None:
    """Create (once) a demo tenant, number, agent, owner and 60 minutes; print a new key
    (earlier ones keep working) and a fresh password for the demo owner."""
    db.upgrade()
    try:
        tenant = tenant_service.find_tenant(DEMO_TENANT)
    except AppError:
        tenant = tenant_service.create_tenant(actor=CLI, name=DEMO_TENANT, plan="business")
        billing.grant(tenant=tenant, actor=CLI, minutes=60, note="Demo credit")
    agents = agent_service.list_agents(tenant=tenant)
    if agents:
        agent = agents[0]
    else:
        agent = agent_service.create_agent(
            tenant=tenant,
            actor=CLI,
            name="Demo receptionist",
            system_prompt="You are the friendly receptionist of a small clinic. Answer briefly.",
            greeting_text="Halo, terima kasih sudah menelepon. Ada yang bisa saya bantu?",
        )
    numbers = number_service.list_numbers(tenant=tenant)
    number = (
        numbers[0]
        if numbers
        else number_service.add_number(
            tenant=tenant, actor=CLI, display_number=DEMO_NUMBER, label="Demo line"
        )
    )
    if number.agent_id is None:
        number = number_service.assign_agent(
            tenant=tenant, actor=CLI, number_id=number.id, agent_id=agent.id
        )
    # A new key each run; the earlier ones stay valid, as a key in use by a running shell or
    # script must not stop working because the demo was set up again.
    _, key = key_service.create_key(tenant=tenant, actor=CLI, name="demo")
    password = demo_owner_password(tenant)
    click.echo(f"Demo tenant {tenant.id}: number {number.display_number} -> agent {agent.id}")
    click.echo(f"API key (earlier demo keys keep working): {key}")
    click.echo(f"Dashboard: sign in as {DEMO_OWNER} with the password {password}")
    runtime_token = current_app.config.get("RUNTIME_TOKEN")
    if runtime_token:
        click.echo(f"Runtime API token (Authorization: Bearer ...): {runtime_token}")
    else:
        click.echo("Runtime API off: RUNTIME_TOKEN is not set.")


def init_app(app: Flask) -> None:
    for group in (
        tenants_cli,
        keys_cli,
        numbers_cli,
        credits_cli,
        db_cli,
        maintenance_cli,
        calls_cli,
        deliveries_cli,
        dev_cli,
        users_cli,
    ):
        app.cli.add_command(group)
    app.cli.add_command(demo)
