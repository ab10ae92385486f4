"""Several hosts on one database and one Redis: two gunicorn instances, two worker.py, call
lifecycles alternating between the hosts, a whole host (its gunicorn and its worker) SIGKILLed
mid-burst and started again, then Redis stopped for 3 s and started again empty.

The workers run with the shipped lease, sweep interval and timeouts (app/config.py), so the
recovery measured is the one a deployment gets: every delivery is sent within RECOVERY_LIMIT
seconds of the fault ending (or of its event, if that came later). Also: every call charged
exactly once, the balance equal to the ledger, every call.ended delivered to a real receiver with
one recorded attempt per delivery, and a tenant's rate limit counted exactly across the hosts.
`pytest -s` prints the recovery figures.

It runs in both passes: several hosts mean PostgreSQL, but two web units on one SQLite file
are a deployment too, and the recovery it times does not depend on the database.
"""

import os
import threading
import time
from datetime import datetime

import pytest
import requests
from redis import Redis
from rq import Worker

from app import config as defaults
from app.models import Delivery, DeliveryAttempt, Event
from app.services import billing
from app.services import keys as key_service
from app.services import tenants as tenant_service
from app.util import utcnow
from tests.call_flow import backdate
from tests.conftest import RUNTIME_TOKEN
from tests.helpers import ACTOR
from tests.receiver import Answer, Receiver
from tests.system.test_faults import assert_charged_once, assert_clean_logs, signed
from tests.system.workers import ThrowawayRedis, register_webhook, rq_config, wait_until

RECOVERY_LIMIT = 30.0  # seconds after a fault ends (DESIGN.md section 4, "Outbox")
REDIS_OUTAGE = 3.0
FIRST_BURST = 250  # call lifecycles; the host dies halfway through
SECOND_BURST = 100  # Redis goes away a third of the way through
CLIENTS = 4
# The shipped recovery settings: what a deployment gets, not the tests' shortened ones.
SHIPPED = {
    name: getattr(defaults, name)
    for name in (
        "WEBHOOK_LEASE_SECONDS",
        "SWEEP_INTERVAL",
        "WEBHOOK_CONNECT_TIMEOUT",
        "WEBHOOK_TIMEOUT",
        "WEBHOOK_WORKERS",
    )
}
HOST_SETTINGS = {**SHIPPED, "FUNCTION_WORKERS": 2, "RUNTIME_TOKEN": RUNTIME_TOKEN}
# The test's one tenant has one webhook: that many of its deliveries are in flight at once,
# whatever the number of hosts (fair delivery). So what piles up for it while a fault lasts
# is sent two at a time after: it takes the calls' last event only (one delivery a call), so
# that the time measured is the recovery's, not that of one webhook's backlog.
SUBSCRIBED = ["call.ended"]
IN_FLIGHT = min(
    defaults.WEBHOOK_IN_FLIGHT_PER_WEBHOOK,
    int(defaults.WEBHOOK_WORKERS * defaults.WEBHOOK_TENANT_SHARE),
)


@pytest.fixture
def own_redis():
    """A redis-server of this test's own: the test stops it and starts it again."""
    server = ThrowawayRedis()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def app_config(app_config, own_redis):
    return rq_config(app_config, own_redis.url)


class Hosts:
    """The web hosts a runtime client may post to; one that refuses connections is down."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = list(urls)
        self.down: set[str] = set()
        self.lock = threading.Lock()

    def pick(self, turn: int) -> str:
        with self.lock:
            alive = [url for url in self.urls if url not in self.down] or self.urls
        return alive[turn % len(alive)]

    def mark_down(self, url: str) -> None:
        with self.lock:
            self.down.add(url)


class Lifecycles:
    """Numbers of the call lifecycles still to post, drawn by several clients."""

    def __init__(self, first: int, count: int) -> None:
        self.numbers = iter(range(first, first + count))
        self.taken = 0
        self.lock = threading.Lock()

    def take(self) -> int | None:
        with self.lock:
            number = next(self.numbers, None)
            self.taken += number is not None
            return number


class RuntimeClient(threading.Thread):
    """Posts whole call lifecycles, each request to the next host in turn, until the lifecycles
    run out. A request a host did not answer (it died) is posted again to another host, as
    the voice runtime behind a load balancer would: every runtime request is idempotent."""

    def __init__(self, hosts: Hosts, did: str, lifecycles: Lifecycles, number: int) -> None:
        super().__init__(daemon=True)
        self.hosts, self.did, self.lifecycles = hosts, did, lifecycles
        self.talk: dict[str, int] = {}
        self.statuses: list[int] = []
        self.errors: list[str] = []
        self.turn = number

    def post(self, session: requests.Session, path: str, body: dict) -> dict:
        for _ in range(4):
            self.turn += 1
            host = self.hosts.pick(self.turn)
            try:
                response = session.post(
                    f"{host}/internal/v1/calls{path}", json=body, timeout=(2, 30)
                )
            except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError):
                self.hosts.mark_down(host)  # no answer, or one cut off: the host died
                continue
            self.statuses.append(response.status_code)
            if response.status_code >= 300:
                self.errors.append(f"{path} {response.status_code} {response.text[:200]}")
            return response.json()
        raise AssertionError(f"no host answered {path}")

    def run(self) -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {RUNTIME_TOKEN}"
        try:
            while (count := self.lifecycles.take()) is not None:
                call = self.post(
                    session,
                    "",
                    {
                        "did": self.did,
                        "callerNumber": f"+6281100{count:06d}",
                        "providerCallId": f"host-test-{count}",
                    },
                )
                call_id, talk = call["id"], 30 + count % 200
                self.post(session, f"/{call_id}/answered", {})
                summary = {"transcriptSummary": f"Call {count}."}
                self.post(session, f"/{call_id}/transcript", summary)
                backdate(call_id, talk + 5)  # through the test's database: it lived that long
                self.post(
                    session,
                    f"/{call_id}/ended",
                    {
                        "status": "ended",
                        "durationSeconds": talk + 5,
                        "talkTimeSeconds": talk,
                        "hangupReason": "normal",
                        "hangupInitiator": "caller",
                        "aiCostIdr": talk * 10,
                    },
                )
                self.talk[call_id] = talk
        except Exception as exc:  # reported by the test, not lost in a thread
            self.errors.append(repr(exc))


def burst(hosts: Hosts, did: str, lifecycles: Lifecycles) -> list[RuntimeClient]:
    """CLIENTS runtime clients posting the lifecycles, started."""
    clients = [RuntimeClient(hosts, did, lifecycles, n) for n in range(CLIENTS)]
    for client in clients:
        client.start()
    return clients


def finish(clients: list[RuntimeClient], timeout: float) -> dict[str, int]:
    for client in clients:
        client.join(timeout)
    assert not any(client.is_alive() for client in clients), "runtime clients still running"
    errors = [error for client in clients for error in client.errors]
    assert errors == [], errors[:5]
    assert not [s for client in clients for s in client.statuses if s >= 500]
    return {call_id: t for client in clients for call_id, t in client.talk.items()}


class HeldReceiver(Receiver):
    """A receiver that can hold its answers for a while (requests in flight when a worker
    dies), counting the requests it holds."""

    def __init__(self) -> None:
        self.hold = threading.Event()
        self.holding = 0
        super().__init__(self.answer_request)

    def answer_request(self, request) -> Answer:
        if not self.hold.is_set():
            return Answer()
        with self.lock:
            self.holding += 1
        try:
            deadline = time.monotonic() + 2
            while self.hold.is_set() and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            with self.lock:
                self.holding -= 1
        return Answer()


def recovery(since: datetime, fault_ended: datetime) -> tuple[float, int]:
    """The longest a delivery created since `since` waited after the fault ended (or after it
    was created, if that was later) until its success was recorded; and how many had been
    created and were not settled yet when the fault ended."""
    worst, pending = 0.0, 0
    rows = Delivery.select(Delivery.created_at, Delivery.completed_at).where(
        Delivery.created_at >= since
    )
    for created_at, completed_at in rows.tuples():
        worst = max(worst, (completed_at - max(created_at, fault_ended)).total_seconds())
        pending += created_at <= fault_ended < completed_at
    return worst, pending


def wait_settled(since: datetime, fault_ended: datetime, fault: str, workers) -> None:
    """Until every delivery created since `since` succeeded; fails, saying how many were still
    not sent how long after the fault ended, once that is well past RECOVERY_LIMIT."""
    unsent = Delivery.select().where(
        (Delivery.created_at >= since) & (Delivery.status != "succeeded")
    )
    deadline = time.monotonic() + RECOVERY_LIMIT + 10
    while unsent.exists():
        if time.monotonic() > deadline:
            waited = (utcnow() - fault_ended).total_seconds()
            raise AssertionError(
                f"{unsent.count()} deliveries still not sent {waited:.1f} s after {fault} "
                f"(limit {RECOVERY_LIMIT:g} s)\n" + workers.logs()
            )
        time.sleep(0.1)


def wait_for_pools(client: Redis, processes: int, workers, timeout: float = 30) -> None:
    """Until every worker.py started has its whole pool on both queues in RQ's registry."""
    pool = {"functions": HOST_SETTINGS["FUNCTION_WORKERS"], "webhooks": SHIPPED["WEBHOOK_WORKERS"]}

    def serving() -> bool:
        served = [name for worker in Worker.all(client) for name in worker.queue_names()]
        return all(served.count(name) >= processes * size for name, size in pool.items())

    wait_until(serving, timeout, "the workers did not start", workers)


def sending_worker(client: Redis, processes: list, workers) -> int:
    """Which of the worker.py processes has a delivery job running in its pool now (each
    started in a session of its own: its pool's workers are in its process group)."""
    for worker in Worker.all(client):
        if "webhooks" in worker.queue_names() and worker.get_current_job_id() and worker.pid:
            group = os.getpgid(worker.pid)
            for number, process in enumerate(processes):
                if process.pid == group:
                    return number
    raise AssertionError("no worker is sending a delivery\n" + workers.logs())


def assert_rate_limit_shared(hosts: list[str]) -> None:
    """A starter tenant (60 a minute) alternating between the hosts: exactly 60 answered, the
    rest 429, and the remaining count going down by one whichever host answered."""
    starter = tenant_service.create_tenant(actor=ACTOR, name="starter", plan="starter")
    key = key_service.create_key(actor=ACTOR, tenant=starter, name="hosts")[1]
    session = requests.Session()
    statuses, remaining = [], []
    for number in range(70):
        response = session.get(
            f"{hosts[number % 2]}/api/v1/agents", headers={"x-api-key": key}, timeout=30
        )
        statuses.append(response.status_code)
        remaining.append(int(response.headers["X-RateLimit-Remaining"]))
    assert statuses == [200] * 60 + [429] * 10
    assert remaining == list(range(59, -1, -1)) + [0] * 10


@pytest.mark.slow
def test_two_hosts_lose_nothing_and_recover_in_seconds(tenant, did, workers, own_redis):
    started = time.monotonic()
    tenant_service.set_plan(
        actor=ACTOR, tenant=tenant, plan="enterprise", rate_limit=10**6, concurrent_calls=10**6
    )
    billing.grant(actor=ACTOR, tenant=tenant, minutes=10**6)
    redis_client = Redis.from_url(own_redis.url)
    with HeldReceiver() as receiver:
        register_webhook(tenant, receiver.url, events=SUBSCRIBED)
        urls = [workers.start_web(workers=2, **HOST_SETTINGS) for _ in range(2)]
        webs = workers.processes[:2]
        worker_processes = [workers.start(**HOST_SETTINGS) for _ in range(2)]
        wait_for_pools(redis_client, 2, workers)
        assert_rate_limit_shared(urls)
        hosts = Hosts(urls)
        # 1. A host dies mid-burst while deliveries are on the wire: its gunicorn and its
        # worker, whose claimed deliveries wait for their lease to run out.
        first_since = utcnow()
        lifecycles = Lifecycles(0, FIRST_BURST)
        clients = burst(hosts, did, lifecycles)
        wait_until(lambda: lifecycles.taken >= FIRST_BURST // 2, 60, "the burst stalled", workers)
        receiver.hold.set()  # the tenant's deliveries in flight end up waiting on an answer
        wait_until(lambda: receiver.holding >= IN_FLIGHT, 20, "deliveries not in flight", workers)
        dying = sending_worker(redis_client, worker_processes, workers)
        workers.kill(webs[dying])
        workers.kill(worker_processes[dying])
        host_died = utcnow()
        receiver.hold.clear()
        # The host comes back, as systemd restarts its units; it rejoins for part 2.
        urls[dying] = workers.start_web(workers=2, **HOST_SETTINGS)
        workers.start(**HOST_SETTINGS)
        talk = finish(clients, 60)
        wait_settled(first_since, host_died, "the host and its worker died", workers)
        after_kill, pending_at_kill = recovery(first_since, host_died)

        # 2. Redis goes away for a few seconds mid-burst and comes back empty: the jobs it
        # held, and the enqueues tried meanwhile, are lost; the rows are not.
        second_since = utcnow()
        lifecycles = Lifecycles(FIRST_BURST, SECOND_BURST)
        clients = burst(Hosts(urls), did, lifecycles)
        wait_until(lambda: lifecycles.taken >= SECOND_BURST // 3, 60, "the burst stalled", workers)
        own_redis.stop()
        time.sleep(REDIS_OUTAGE)
        own_redis.start()
        redis_back = utcnow()
        talk |= finish(clients, 60)
        wait_settled(second_since, redis_back, "Redis came back", workers)
        after_redis, pending_at_restart = recovery(second_since, redis_back)
        received = receiver.event_ids()
        requests_seen = list(receiver.requests)

    figures = (
        f"{len(talk)} calls over two hosts. Every delivery sent {after_kill:.1f} s at most "
        f"after the host and its worker died ({pending_at_kill} were not sent then), and "
        f"{after_redis:.1f} s at most after Redis came back ({pending_at_restart} were not "
        f"sent then); limit {RECOVERY_LIMIT:g} s, with a lease of "
        f"{SHIPPED['WEBHOOK_LEASE_SECONDS']} s and a sweep every {SHIPPED['SWEEP_INTERVAL']:g} s. "
        f"{time.monotonic() - started:.0f} s in all."
    )
    print(figures)
    assert after_kill <= RECOVERY_LIMIT and after_redis <= RECOVERY_LIMIT, (
        figures + "\n" + workers.logs()
    )
    assert len(talk) == FIRST_BURST + SECOND_BURST
    assert_charged_once(tenant, talk)
    sent = {event.id for event in Event.select().where(Event.type.in_(SUBSCRIBED))}
    assert sent and received >= sent
    assert all(signed(request) for request in requests_seen)
    # Each delivery succeeded once, with one recorded attempt: a request cut off by a dying
    # worker was never recorded, and was made again.
    assert {delivery.attempts for delivery in Delivery.select()} == {1}
    assert DeliveryAttempt.select().count() == Delivery.select().count()
    assert_clean_logs(workers)
