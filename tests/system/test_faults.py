"""Faults with real processes on loopback, each bounded: a receiver down and back, a slow
receiver, workers SIGKILLed again and again, and the whole stack on SQLite (2 gunicorn
workers, 2 RQ workers, the runtime posting whole calls from several threads).

Every check is the same: every event delivered at least once with a valid signature, every
call charged exactly once, the balance equal to the ledger, no 5xx, no "database is locked".
The stack runs for 20 s in make test and for 5 minutes in make soak.
"""

import hashlib
import hmac
import math
import random
import threading
import time

import pytest
import requests

from app.db import database
from app.models import Call, CreditTransaction, Delivery, Event, Tenant
from app.services import billing, events
from app.services import tenants as tenant_service
from tests.call_flow import backdate
from tests.conftest import RUNTIME_TOKEN
from tests.helpers import ACTOR
from tests.receiver import Answer, Receiver
from tests.system.workers import WEBHOOK_SECRET, free_port, register_webhook, rq_config, wait_until

CALL_EVENTS = ["call.started", "call.answered", "call.transcript", "call.ended"]


@pytest.fixture
def app_config(app_config, redis_url, redis_client):
    return rq_config(app_config, redis_url)


def emit_many(tenant, count: int) -> set[str]:
    sent = set()
    for number in range(count):
        with database.atomic():
            event = events.emit(
                tenant_id=tenant.id, type="call.ended", data={"callId": f"call_{number}"}
            )
        sent.add(event.id)
    return sent


def signed(request) -> bool:
    expected = (
        "sha256=" + hmac.new(WEBHOOK_SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    )
    return hmac.compare_digest(request.headers.get("X-Service-Signature", ""), expected)


def assert_delivered(receiver, sent: set[str], workers, stall: float = 60) -> None:
    """Every event arrived, every request carried a valid signature, every delivery settled.

    A backlog may take its time; what fails is `stall` seconds without a new event arriving.
    """
    seen, last_progress = 0, time.monotonic()
    while not receiver.event_ids() >= sent:
        count = len(receiver.event_ids() & sent)
        if count > seen:
            seen, last_progress = count, time.monotonic()
        elif time.monotonic() - last_progress > stall:
            missing = len(sent - receiver.event_ids())
            raise AssertionError(f"{missing} of {len(sent)} events missing\n" + workers.logs())
        time.sleep(0.1)
    assert all(signed(request) for request in receiver.requests)
    wait_until(
        lambda: not Delivery.select().where(Delivery.status != "succeeded").exists(),
        20,
        "deliveries not settled",
        workers,
    )


def assert_clean_logs(workers) -> None:
    """No lock errors, and no webhook secret, in any process's log."""
    logs = workers.logs(tail=10**9)
    assert "database is locked" not in logs
    assert WEBHOOK_SECRET not in logs


@pytest.mark.slow
def test_receiver_down_for_a_while_then_back(tenant, workers):
    """Refused connections for 2 s, then the receiver listens on that port: all arrive."""
    port = free_port()
    register_webhook(tenant, f"http://127.0.0.1:{port}/in")
    workers.start(WEBHOOK_RETRY_SCALE=0.0005)  # retries after ~2 ms, 0.15 s, 0.9 s, 3.6 s
    sent = emit_many(tenant, 50)
    wait_until(
        lambda: Delivery.select().where(Delivery.attempts >= 2).count() >= 50,
        30,
        "no failed attempts while the receiver was down",
        workers,
    )
    time.sleep(2)
    with Receiver(port=port) as receiver:
        assert_delivered(receiver, sent, workers)
    assert_clean_logs(workers)


@pytest.mark.slow
def test_slow_receiver_is_retried_until_it_answers_in_time(tenant, workers):
    """Answers slower than the timeout count as failures and are retried; all get through."""
    calls = {"count": 0}

    def slow_at_first(request):
        calls["count"] += 1
        return Answer(delay=1.5 if calls["count"] <= 20 else 0.05)

    with Receiver(slow_at_first) as receiver:
        register_webhook(tenant, receiver.url)
        workers.start(WEBHOOK_TIMEOUT=0.5)
        workers.start(WEBHOOK_TIMEOUT=0.5)
        sent = emit_many(tenant, 30)
        assert_delivered(receiver, sent, workers)
    timed_out = Delivery.select().where(Delivery.attempts > 1).count()
    assert timed_out > 0, "no delivery ever timed out"
    assert_clean_logs(workers)


@pytest.mark.slow
def test_workers_killed_again_and_again_lose_nothing(tenant, workers):
    """Five SIGKILLs during a burst of 300 events, each followed by a fresh worker."""
    with Receiver() as receiver:
        register_webhook(tenant, receiver.url)
        running = [workers.start(), workers.start()]
        sent = set()
        for round_ in range(5):
            sent |= emit_many(tenant, 60)
            time.sleep(0.3)
            victim = running.pop(round_ % len(running))
            workers.kill(victim)
            running.append(workers.start())
        assert_delivered(receiver, sent, workers)
    assert_clean_logs(workers)


class RuntimeClient(threading.Thread):
    """Posts whole calls (start, answered, transcript, ended) until the deadline."""

    def __init__(self, base_url: str, did: str, deadline: float, number: int) -> None:
        super().__init__(daemon=True)
        self.base_url, self.did, self.deadline, self.number = base_url, did, deadline, number
        self.talk: dict[str, int] = {}  # call id -> talkTimeSeconds reported
        self.statuses: list[int] = []
        self.errors: list[str] = []

    def post(self, session, path: str, body: dict) -> dict:
        response = session.post(self.base_url + "/internal/v1/calls" + path, json=body, timeout=30)
        self.statuses.append(response.status_code)
        if response.status_code >= 300:
            self.errors.append(f"{path} {response.status_code} {response.text[:200]}")
        return response.json()

    def run(self) -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {RUNTIME_TOKEN}"
        count = 0
        while time.monotonic() < self.deadline:
            count += 1
            call = self.post(
                session,
                "",
                {
                    "did": self.did,
                    "callerNumber": "+62811000" + f"{self.number}{count:04d}"[-5:],
                    "providerCallId": f"t{self.number}-{count}",
                },
            )
            call_id = call["id"]
            talk = random.randint(1, 300)
            self.post(session, f"/{call_id}/answered", {})
            self.post(session, f"/{call_id}/transcript", {"transcriptSummary": f"Call {count}."})
            ended = {
                "status": "ended",
                "durationSeconds": talk + 5,
                "talkTimeSeconds": talk,
                "hangupReason": "normal",
                "hangupInitiator": "caller",
                "aiCostIdr": talk * 10,
            }
            backdate(call_id, talk + 5)  # through the test's database: it lived its duration
            self.post(session, f"/{call_id}/ended", ended)
            self.post(session, f"/{call_id}/ended", ended)  # a repeat charges nothing
            self.talk[call_id] = talk


def run_stack(tenant, did, workers, seconds: float, threads: int = 3) -> dict[str, int]:
    """2 gunicorn workers, 2 RQ workers and `threads` runtime clients for `seconds`."""
    tenant_service.set_plan(
        actor=ACTOR, tenant=tenant, plan="enterprise", rate_limit=10**6, concurrent_calls=10**6
    )
    billing.grant(actor=ACTOR, tenant=tenant, minutes=10**7)
    with Receiver() as receiver:
        register_webhook(tenant, receiver.url, events=CALL_EVENTS)
        base_url = workers.start_web(workers=2, RUNTIME_TOKEN=RUNTIME_TOKEN, LOG_FORMAT="json")
        workers.start(queues=("functions", "webhooks"))
        workers.start(queues=("webhooks", "functions"))
        deadline = time.monotonic() + seconds
        clients = [RuntimeClient(base_url, did, deadline, n) for n in range(threads)]
        for client in clients:
            client.start()
        for client in clients:
            client.join(seconds + 60)
        talk = {call_id: t for client in clients for call_id, t in client.talk.items()}
        assert talk, "no call completed"
        assert [e for client in clients for e in client.errors] == []
        assert not [s for client in clients for s in client.statuses if s >= 500]
        sent = {event.id for event in Event.select().where(Event.type.in_(CALL_EVENTS))}
        assert len(sent) == 4 * len(talk)
        loaded = time.monotonic()
        assert_delivered(receiver, sent, workers)
        drained = time.monotonic() - loaded
    assert_charged_once(tenant, talk)
    assert_clean_logs(workers)
    return {
        "calls": len(talk),
        "events": len(sent),
        "requests": len(receiver.requests),
        "drain_seconds": round(drained, 1),
    }


def assert_charged_once(tenant, talk: dict[str, int]) -> None:
    usage = list(CreditTransaction.select().where(CreditTransaction.type == "usage"))
    assert sorted(t.call_id for t in usage) == sorted(talk)
    for transaction in usage:
        assert transaction.minutes == -math.ceil(talk[transaction.call_id] / 60)
    assert Call.select().where(Call.status != "ended").count() == 0
    ledger = sum(t.minutes for t in CreditTransaction.select())
    assert Tenant.get_by_id(tenant.id).balance_minutes == ledger


@pytest.mark.slow
@pytest.mark.sqlite_only
def test_stack_on_sqlite_under_load_loses_nothing(tenant, did, workers):
    counts = run_stack(tenant, did, workers, seconds=20)
    print(counts)


@pytest.mark.soak
@pytest.mark.sqlite_only
def test_stack_on_sqlite_soaks_for_minutes(tenant, did, workers):
    counts = run_stack(tenant, did, workers, seconds=300)
    print(counts)
