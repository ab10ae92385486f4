"""The SQL statements of a call's lifecycle, exactly: an extra query on this path fails here.

Every runtime request runs these under load, so each statement counts (bench/ingestion.py).
Only statements of the test's own thread are recorded: inline delivery jobs run in another.
"""

import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from app import db
from app.models import Delivery
from app.services import billing
from app.services import tenants as tenant_service
from app.services import webhooks as webhook_service
from tests.call_flow import RUNTIME, answer, backdate, end, end_body, start
from tests.helpers import ACTOR, captured_queries

TABLE = re.compile(r'^(?:(UPDATE|INSERT) (?:INTO )?|(SELECT) .*? FROM )"?(\w+)', re.S)
FUNCTION = re.compile(r"^SELECT (\w+)\(", re.S)  # a SELECT of a function alone: a lock


def kind(sql: str) -> str:
    """'SELECT phone_number', 'UPDATE call', ...: the verb and the first table named (or the
    function a SELECT without a table calls: 'SELECT pg_advisory_xact_lock')."""
    match = TABLE.match(sql.strip())
    if match is None:
        match = FUNCTION.match(sql.strip())
        assert match, sql
        return f"SELECT {match.group(1)}"
    verb = match.group(1) or match.group(2)
    return f"{verb} {match.group(3)}"


@contextmanager
def statements() -> Iterator[list[str]]:
    """The kinds of statement this thread runs meanwhile, filled in when the block ends."""
    kinds: list[str] = []
    with captured_queries(this_thread=True) as seen:
        yield kinds
    kinds.extend(kind(event.sql) for event in seen)


def run_lifecycle(client, headers, did, **start_fields) -> dict[str, list[str]]:
    """Start, answer, transcribe and end one call; the statements of each step."""
    steps = {}
    with statements() as seen:
        response = start(client, headers, did, **start_fields)
    assert response.status_code == 201, response.get_data(as_text=True)
    steps["start"] = seen
    call_id = response.json["id"]
    with statements() as seen:
        assert answer(client, headers, call_id).status_code == 200
    steps["answered"] = seen
    with statements() as seen:
        response = client.post(
            f"{RUNTIME}/{call_id}/transcript", json={"transcriptSummary": "Asked."}, headers=headers
        )
        assert response.status_code == 200
    steps["transcript"] = seen
    body = end_body()
    backdate(call_id, body["durationSeconds"])  # the call lived as long as it reports
    with statements() as seen:
        ended = client.post(f"{RUNTIME}/{call_id}/ended", json=body, headers=headers)
        assert ended.status_code == 200
    steps["ended"] = seen
    return steps


# An event: the subscribed webhooks, its seq from the tenant row (which locks the row until
# commit: the tenant's events commit in seq order), the event.
EVENT = ["SELECT webhook", "UPDATE tenant", "INSERT event"]
CHARGE = ["UPDATE tenant", "INSERT credit_transaction"]
# Counting the call locks the tenant row, reads balance and holds, and takes call.started's
# seq; the second UPDATE adds the new call's hold under that lock.
STARTED = ["UPDATE tenant", "SELECT webhook", "INSERT event"]
LIFECYCLE = {
    "start": ["SELECT phone_number", *STARTED, "UPDATE tenant", "INSERT call"],
    "answered": ["UPDATE call", *EVENT],
    "transcript": ["UPDATE call", *EVENT],
    "ended": ["UPDATE call", *EVENT, *CHARGE],
}


def test_a_call_lifecycle_runs_20_statements(client, runtime_headers, did):
    steps = run_lifecycle(client, runtime_headers, did)
    assert steps == LIFECYCLE
    assert sum(map(len, steps.values())) == 20


def test_a_subscribed_webhook_adds_one_insert_per_event_and_its_dispatch(
    client, runtime_headers, tenant, did
):
    for url in ("http://127.0.0.1:9/a", "http://127.0.0.1:9/b"):
        webhook_service.create_webhook(
            actor=ACTOR,
            tenant=tenant,
            url=url,
            events=["call.started", "call.ended"],
            secret="s" * 32,
        )
    steps = run_lifecycle(client, runtime_headers, did)
    # Both webhooks' deliveries of an event are one INSERT; unsubscribed events write none.
    # They are dispatched in the same transaction: the tenant's dispatch lock, tried
    # (PostgreSQL's advisory lock; on SQLite the transaction's own), a count of the places and,
    # when one is free, the next due deliveries and a conditional UPDATE each.
    lock = [] if db.is_sqlite() else ["SELECT pg_try_advisory_xact_lock"]
    places = due = ["SELECT delivery"]
    assert steps["start"] == [
        "SELECT phone_number",
        *STARTED,
        "INSERT delivery",
        *lock,
        *places,
        *due,
        *["UPDATE delivery"] * 2,
        "UPDATE tenant",
        "INSERT call",
    ]
    assert steps["answered"] == LIFECYCLE["answered"]
    assert steps["transcript"] == LIFECYCLE["transcript"]
    ended, charge = steps["ended"][:-2], steps["ended"][-2:]
    assert charge == CHARGE
    head = ["UPDATE call", *EVENT, "INSERT delivery", *lock, *places]
    # Then, as the first two deliveries are still in flight or not (the inline jobs send them
    # meanwhile): nothing more, or the next due deliveries and an UPDATE for each place.
    assert ended[: len(head)] == head
    rest = ended[len(head) :]
    assert set(rest) <= {"SELECT delivery", "UPDATE delivery"}
    assert rest.count("UPDATE delivery") <= 2
    assert Delivery.select().count() == 4


def test_a_provider_call_id_adds_the_lookup_of_a_repeat(client, runtime_headers, did):
    steps = run_lifecycle(client, runtime_headers, did, providerCallId="prov-7")
    assert steps["start"] == ["SELECT phone_number", "SELECT call", *LIFECYCLE["start"][1:]]


def test_repeats_change_nothing_in_two_statements(client, runtime_headers, did):
    call_id = start(client, runtime_headers, did).json["id"]
    answer(client, runtime_headers, call_id)
    end(client, runtime_headers, call_id)
    with statements() as seen:
        again = client.post(f"{RUNTIME}/{call_id}/ended", json=end_body(), headers=runtime_headers)
        assert again.status_code == 200
        assert answer(client, runtime_headers, call_id).status_code == 409
    assert seen == ["UPDATE call", "SELECT call"] * 2


def test_a_duration_past_the_calls_age_is_refused_in_two_statements(client, runtime_headers, did):
    """The bound on the duration is in the conditional UPDATE: an end within it costs no
    statement more (LIFECYCLE), and one beyond it is the UPDATE and the read that tells why."""
    call_id = start(client, runtime_headers, did).json["id"]
    with statements() as seen:
        refused = client.post(
            f"{RUNTIME}/{call_id}/ended", json=end_body(), headers=runtime_headers
        )
        assert refused.status_code == 422
    assert seen == ["UPDATE call", "SELECT call"]


@pytest.mark.parametrize(("balance", "emits"), [(10, True), (100, False)])
def test_a_threshold_crossing_adds_the_credits_low_event(
    client, runtime_headers, tenant, did, balance, emits
):
    if balance != 100:  # did's tenant has 100 minutes already
        billing.adjust(tenant=tenant, actor=ACTOR, minutes=balance - 100)
    steps = run_lifecycle(client, runtime_headers, did)
    assert steps["ended"] == LIFECYCLE["ended"] + (EVENT if emits else [])


def test_a_call_without_credits_adds_the_end_event(client, runtime_headers, tenant, did):
    billing.adjust(tenant=tenant, actor=ACTOR, minutes=-100)
    with statements() as seen:
        assert start(client, runtime_headers, did).status_code == 409
    # No hold to take: the tenant row is updated once, and again for call.ended's seq.
    assert seen == ["SELECT phone_number", *STARTED, "INSERT call", *EVENT]


def test_a_call_over_the_concurrency_limit_adds_the_end_event(client, runtime_headers, tenant, did):
    tenant_service.set_plan(actor=ACTOR, tenant=tenant, plan="business", concurrent_calls=1)
    assert start(client, runtime_headers, did).status_code == 201
    with statements() as seen:
        refused = start(client, runtime_headers, did)
    assert refused.json["error"]["code"] == "concurrency_limit"
    assert seen == ["SELECT phone_number", *STARTED, "INSERT call", *EVENT]


def test_transcript_turns_are_one_update_and_one_insert(client, runtime_headers, did):
    call_id = start(client, runtime_headers, did).json["id"]
    turns = [{"role": "agent", "text": "Halo."}, {"role": "caller", "text": "Hai."}]
    with statements() as seen:
        response = client.post(
            f"{RUNTIME}/{call_id}/transcript", json={"turns": turns}, headers=runtime_headers
        )
        assert response.status_code == 200
    # The UPDATE checks the limits against the call's counters and takes the turns' seqs.
    assert seen == ["UPDATE call", "INSERT call_turn"]
    with statements() as seen:
        response = client.post(
            f"{RUNTIME}/{call_id}/transcript",
            json={"turns": turns, "transcriptSummary": "Greetings."},
            headers=runtime_headers,
        )
        assert response.status_code == 200
    assert seen == ["UPDATE call", "INSERT call_turn", "UPDATE call", *EVENT]
