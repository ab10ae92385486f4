"""The event log's order under concurrency: events of one tenant written at once by several
processes and threads get seq 1, 2, 3, … in commit order, and a consumer paging with after
while they are written sees every one, once, even one whose transaction committed late.

On PostgreSQL this is the real check (transactions run at once; the tenant row's lock is what
orders them); on SQLite the IMMEDIATE transactions serialise every writer anyway.
"""

import multiprocessing
import random
import threading
import time
from datetime import datetime

import pytest

from app.db import database
from app.models import Event
from app.services import events

pytestmark = pytest.mark.slow

PROCESSES, THREADS, EVENTS = 3, 3, 20
# Every event claims to have happened at the same moment: their timestamps cannot order them.
MOMENT = datetime(2026, 1, 1, 9, 15, 2, 120000)


def write(app, tenant_id: str, count: int, barrier, seed: int) -> list[str]:
    """Write count events, each in a transaction of its own that stays open a moment after
    the event took its seq (so, without the tenant row's lock, a later seq could commit
    first); their ids."""
    chance = random.Random(seed)
    written = []
    with app.app_context(), database.connection_context():
        barrier.wait(timeout=60)
        for number in range(count):
            with database.atomic():
                event = events.emit(
                    tenant_id=tenant_id,
                    type="call.ended",
                    data={"callId": f"call_{seed}_{number}"},
                    occurred_at=MOMENT,
                )
                time.sleep(chance.uniform(0, 0.003))
            written.append(event.id)
    return written


def write_from_threads(config, tenant_id, barrier, results, process: int) -> None:
    """Child process: the app on the shared database, THREADS writers released together."""
    from app import create_app

    app = create_app(config)
    found: list[str] = []

    def writer(thread: int) -> None:
        found.extend(write(app, tenant_id, EVENTS, barrier, seed=process * 100 + thread))

    threads = [threading.Thread(target=writer, args=(number,)) for number in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results.put(found)


class Pager(threading.Thread):
    """A consumer paging with after, again and again, until told the writers are done and a
    page then comes back empty."""

    def __init__(self, app, tenant) -> None:
        super().__init__()
        self.app, self.tenant = app, tenant
        self.seen: list[str] = []
        self.pages = 0
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.app.app_context(), database.connection_context():
                after = None
                while True:
                    finished = self.done.is_set()  # read before the page: nothing can follow
                    page = events.list_events(tenant=self.tenant, after=after, limit=7)
                    self.pages += 1
                    self.seen += [event["id"] for event in page.events]
                    after = page.next_after
                    if finished and not page.events:
                        return
                    time.sleep(0.001)  # a consumer polling; leaves the writers the CPU
        except BaseException as exc:  # reported by the test
            self.error = exc


def log_order(tenant) -> list[tuple[str, int]]:
    query = Event.select(Event.id, Event.seq).where(Event.tenant == tenant).order_by(Event.seq)
    return [(event.id, event.seq) for event in query]


def test_concurrent_writers_are_read_by_a_pager_in_commit_order_missing_none(
    app, app_config, tenant
):
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES * THREADS)
    results = context.Queue()
    children = [
        context.Process(
            target=write_from_threads, args=(app_config, tenant.id, barrier, results, number)
        )
        for number in range(PROCESSES)
    ]
    pager = Pager(app, tenant)
    pager.start()
    for child in children:
        child.start()
    written = [event_id for _ in children for event_id in results.get(timeout=120)]
    for child in children:
        child.join(timeout=30)
        assert child.exitcode == 0
    pager.done.set()
    pager.join(timeout=60)
    assert pager.error is None and not pager.is_alive()

    total = PROCESSES * THREADS * EVENTS
    order = log_order(tenant)
    assert sorted(written) == sorted(event_id for event_id, _ in order)
    # Every event seen once, in the log's order, though the pager read while they were
    # written (many pages, most of them before the writers were done).
    assert len(pager.seen) == len(set(pager.seen)) == total
    assert pager.seen == [event_id for event_id, _ in order]
    assert pager.pages > total // 7
    assert [seq for _, seq in order] == list(range(1, total + 1))


def test_an_event_that_commits_late_is_not_skipped_by_a_pager(app, tenant):
    """A takes its seq and holds its transaction open; B, written meanwhile, waits for A's
    commit (the tenant row's lock) and so takes the seq after A's: a pager that read
    nothing new while A was open reads A, then B, and never B without A."""
    first = events.record(tenant_id=tenant.id, type="call.started", data={})
    holding, release = threading.Event(), threading.Event()
    taken: dict[str, Event] = {}

    def writer(name: str, wait: threading.Event | None = None) -> None:
        with app.app_context(), database.connection_context(), database.atomic():
            taken[name] = events.emit(tenant_id=tenant.id, type="call.ended", data={})
            if wait is not None:
                holding.set()
                assert wait.wait(timeout=30)

    late = threading.Thread(target=writer, args=("late", release))
    late.start()
    assert holding.wait(timeout=30)
    other = threading.Thread(target=writer, args=("other",))
    other.start()
    other.join(timeout=0.5)
    assert other.is_alive(), "a second writer of the tenant did not wait for the first"
    assert events.list_events(tenant=tenant, after=first.id).events == []
    release.set()
    late.join(timeout=30)
    other.join(timeout=30)
    assert taken["other"].seq == taken["late"].seq + 1
    page = events.list_events(tenant=tenant, after=first.id)
    assert [event["id"] for event in page.events] == [taken["late"].id, taken["other"].id]


@pytest.mark.postgres_only
def test_another_tenants_events_do_not_wait_for_a_tenants_open_transaction(
    app, tenant, other_tenant
):
    """The lock is the tenant's row: on PostgreSQL other tenants write on meanwhile."""
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with app.app_context(), database.connection_context(), database.atomic():
            events.emit(tenant_id=tenant.id, type="call.ended", data={})
            holding.set()
            assert release.wait(timeout=30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(timeout=30)
        started = time.monotonic()
        with database.atomic():
            written = events.emit(tenant_id=other_tenant.id, type="call.ended", data={})
        assert time.monotonic() - started < 1 and written.seq == 1
    finally:
        release.set()
        holder.join(timeout=30)
