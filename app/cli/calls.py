"""flask calls: drive a call by hand (simulate), or play the runtime for queued calls."""

import json
import time
from datetime import timedelta
from typing import Any

import click
from flask.cli import AppGroup
from marshmallow import ValidationError

from app.cli.common import user_errors
from app.resources.fields import MAX_INT32
from app.runtime.schemas import MAX_CALL_SECONDS, Variables
from app.services import billing, demo_runtime, function_calls
from app.services import events as event_service
from app.services.calls import constants as call_constants
from app.services.calls import lifecycle as call_lifecycle
from app.util import utcnow

calls_cli = AppGroup("calls", help="Drive calls by hand, as the voice runtime would.")


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
@click.option(
    "--seconds",
    type=click.IntRange(0, MAX_CALL_SECONDS),
    default=60,
    show_default=True,
    help="How long the call talks. It is recorded as having started that long (and a 3 s "
    "ring) ago and ends now, with no waiting.",
)
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
    """Run a whole call (start, answer, function call, transcript, end) as the runtime would.

    The call has already happened: it is recorded as started --seconds and a 3 s ring ago,
    so it ends now having lived as long as it reports, with no waiting.
    """
    parameters = json_object(params, "--params")
    try:
        values = Variables().deserialize(json_object(variables, "--variables"))
    except ValidationError as exc:
        raise click.BadParameter(json.dumps(exc.messages), param_hint="--variables") from None
    since = utcnow()
    # The simulated call has already happened: it started a ring and its talk ago, was
    # answered a ring after that and ends now, so it lasted as long as it reports.
    started = call_lifecycle.start_call(
        did=did,
        caller_number=caller,
        variables=values,
        agent_version=agent_version,
        started_at=since - timedelta(seconds=demo_runtime.RING_SECONDS + seconds),
    )
    call = started.call
    click.echo(
        f"Call {call.id} from {caller} to {did}: agent {call.agent_id}, version "
        f"{call.agent_version}"
    )
    missing = started.session["missing_variables"]
    if missing:
        click.echo(f"Placeholders without a value (left as written): {', '.join(missing)}")
    answered_at = call.started_at + timedelta(seconds=demo_runtime.RING_SECONDS)
    ended_at = answered_at + timedelta(seconds=seconds)  # since
    call_lifecycle.answer_call(call_id=call.id, answered_at=answered_at)
    if function_name:
        outcome = function_calls.invoke(
            call_id=call.id, function_name=function_name, parameters=parameters
        )
        click.echo(f"Function {function_name}: {json.dumps(outcome.as_dict())}")
    if turns:
        call_lifecycle.add_transcript(call_id=call.id, turns=demo_runtime.example_turns(seconds))
        click.echo(f"Transcript: {len(demo_runtime.EXAMPLE_TURNS)} turns")
    if transcript:
        call_lifecycle.add_transcript(call_id=call.id, transcript_summary=transcript)
    call = call_lifecycle.end_call(
        call_id=call.id,
        status="ended",
        duration_seconds=demo_runtime.RING_SECONDS + seconds,
        talk_time_seconds=seconds,
        hangup_reason="normal",
        hangup_initiator="caller",
        ai_cost_idr=0,
        ended_at=ended_at,
    )
    balance = billing.get_balance(tenant=call.tenant).balance_minutes
    click.echo(f"Ended after {seconds} s: charged {call.billed_minutes} min; balance {balance} min")
    emitted = event_service.call_events_since(
        tenant_id=call.tenant_id, call_id=call.id, since=since
    )
    for event in emitted:
        click.echo(f"  {event.type} {event.id}")


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
    as a runtime does (dispatch), answer or not, talk, end. Each call reports the duration it
    really lived, from its claim to its end. Stop with Ctrl+C."""
    runtime = demo_runtime.DemoRuntime(
        max_calls=max_calls, seconds=seconds, answer_rate=answer_rate, seed=seed
    )
    while True:
        for outcome in runtime.step():
            if outcome.result == "ended":
                click.echo(f"{outcome.call_id}: ended after {seconds} s")
            else:
                click.echo(f"{outcome.call_id} to {outcome.callee_number}: {outcome.result}")
        if once and runtime.idle():
            return
        time.sleep(interval)
