"""Paging the event log: p50 of GET /api/v1/events for the first page against the last page of
a tenant's 100,000 events, on SQLite and on PostgreSQL.

The events are written in bulk (INSERT of 1,000 rows at a time, seq 1..N, a tenant of their
own beside another tenant's as many), then each page is requested in alternating rounds
through the app (in process, one request at a time). A page is a range of the (tenant, seq)
index from the after event's seq, so the last page should cost what the first does.
Target: last-page p50 <= 1.3 x first-page p50.

The second page is the first one read with an after, for reference. A page filtered by type
reads the rows of the other types it passes over too (a quarter of the events are
call.ended), so the filtered last page is set against the filtered first page. The CPU
columns time the same requests with the thread's CPU clock (see calls_list.py: a CPU ratio
near 1 beside a higher wall ratio means noise, not scaling). A second table times the last
page's query alone, as the API reads it and, for comparison only, with OFFSET: what the
keyset saves.

PostgreSQL runs when BENCH_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/test)
answers; a database is created and dropped for it.

Usage: python bench/events_paging.py [EVENTS]   (default 100,000)
"""

import logging
import statistics
import sys
import time
from datetime import datetime, timedelta

from _harness import (
    POSTGRES_URL,
    percentile,
    postgres_database,
    print_table,
    temp_sqlite_url,
)
from seed import seed_tenant

ROUNDS = 30
PER_ROUND = 10
PAGE = 50
BATCH = 1000
TARGET = 1.3
FIRST_ENDED = "first page, types=call.ended"
QUERIES: list[list[object]] = []  # the last page's query alone, per database
TYPES = ("call.started", "call.answered", "call.ended", "call.transcript")
START = datetime(2026, 1, 1)


def write_events(tenant_id: str, count: int) -> list[str]:
    """count events of the tenant, seq 1..count, one second apart, in bulk; their ids in seq
    order."""
    from app.db import database
    from app.models import Event, Tenant
    from app.util import new_id

    ids = [new_id("evt") for _ in range(count)]
    with database.atomic():
        for start in range(0, count, BATCH):
            rows = [
                {
                    "id": ids[n],
                    "tenant": tenant_id,
                    "type": TYPES[n % len(TYPES)],
                    "data": {"callId": f"call_{n // len(TYPES):020d}", "durationSeconds": n},
                    "created_at": START + timedelta(seconds=n),
                    "call_id": f"call_{n // len(TYPES):020d}",
                    "seq": n + 1,
                }
                for n in range(start, min(start + BATCH, count))
            ]
            Event.insert_many(rows).as_rowcount().execute()
        Tenant.update(event_seq=count).where(Tenant.id == tenant_id).execute()
    return ids


def settle() -> None:
    """What a database does soon after a bulk load (see seed.py): the WAL into the file, or
    the visibility map and statistics."""
    from app import db

    if db.is_sqlite():
        db.database.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    else:
        db.database.execute_sql("VACUUM (ANALYZE) event")


def last_page_queries(tenant_id: str, count: int) -> tuple[float, float]:
    """p50 seconds of the last page's query alone: as the API reads it (after the seq of the
    event before it) and with OFFSET instead (for comparison; the API never does)."""
    from app.models import Event

    columns = (Event.id, Event.type, Event.data, Event.created_at)
    base = Event.select(*columns).where(Event.tenant == tenant_id).order_by(Event.seq)
    keyset = base.where(Event.seq > count - PAGE).limit(PAGE + 1)
    offset = base.limit(PAGE).offset(count - PAGE)
    times: dict[str, list[float]] = {"keyset": [], "offset": []}
    for _ in range(ROUNDS):
        for name, query in (("keyset", keyset), ("offset", offset)):
            started = time.perf_counter()
            assert len(list(query.clone())) == PAGE  # a clone: a query keeps its results
            times[name].append(time.perf_counter() - started)
    return statistics.median(times["keyset"]), statistics.median(times["offset"])


def measure(label: str, database_url: str, count: int) -> list[list[object]]:
    from app import create_app, db, queue

    app = create_app({"DATABASE_URL": database_url, "REDIS_URL": None, "QUEUE_MODE": "inline"})
    logging.getLogger("app.requests").setLevel(logging.WARNING)  # no line per request
    app.logger.disabled = True
    with app.app_context():
        db.upgrade()
        began = time.perf_counter()
        seeded = seed_tenant(name="events", calls=0, agents=1, number="+6221000001")
        other = seed_tenant(name="neighbour", calls=0, agents=1, number="+6221000002")
        ids = write_events(seeded.tenant_id, count)
        write_events(other.tenant_id, count)
        settle()
        print(f"{label}: wrote {2 * count:,} events in {time.perf_counter() - began:.0f} s")
        client = app.test_client()
        headers = {"x-api-key": seeded.key}
        cases = {
            "first page": {},
            "second page": {"after": ids[PAGE - 1]},
            "middle page": {"after": ids[count // 2 - 1]},
            "last page": {"after": ids[count - PAGE - 1]},
            FIRST_ENDED: {"types": "call.ended"},
            "last page, types=call.ended": {
                "after": ids[count - 4 * PAGE - 1],
                "types": "call.ended",
            },
        }
        times: dict[str, list[float]] = {case: [] for case in cases}
        cpu: dict[str, list[float]] = {case: [] for case in cases}
        for _ in range(ROUNDS):  # alternate, so drift on the machine hits every case alike
            for case, query in cases.items():
                for _ in range(PER_ROUND):
                    started, started_cpu = time.perf_counter(), time.thread_time()
                    response = client.get(
                        "/api/v1/events", query_string={"limit": PAGE, **query}, headers=headers
                    )
                    cpu[case].append(time.thread_time() - started_cpu)
                    times[case].append(time.perf_counter() - started)
                    assert response.status_code == 200, response.get_data(as_text=True)
                    assert len(response.json["events"]) == PAGE, case
        assert response.json["hasMore"] is False
        keyset, offset = last_page_queries(seeded.tenant_id, count)
        queue.shutdown(app)
        db.close_all()
    rows: list[list[object]] = []
    for case in cases:
        first_case = FIRST_ENDED if "types" in cases[case] else "first page"
        first = statistics.median(times[first_case])
        first_cpu = statistics.median(cpu[first_case])
        p50 = statistics.median(times[case])
        ratio = p50 / first
        rows.append(
            [
                label,
                case,
                f"{p50 * 1000:.2f}",
                f"{percentile(times[case], 0.99) * 1000:.2f}",
                f"{ratio:.2f}",
                "" if case == first_case else ("yes" if ratio <= TARGET else "NO"),
                f"{statistics.median(cpu[case]) * 1000:.2f}",
                f"{statistics.median(cpu[case]) / first_cpu:.2f}",
            ]
        )
    QUERIES.append(
        [label, f"{keyset * 1000:.2f}", f"{offset * 1000:.2f}", f"{offset / keyset:.0f}"]
    )
    return rows


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    rows = measure("SQLite", temp_sqlite_url(), count)
    with postgres_database() as url:
        if url is None:
            print(f"PostgreSQL skipped: nothing answers at {POSTGRES_URL}")
        else:
            rows += measure("PostgreSQL", url, count)
    print_table(
        f"GET /api/v1/events?limit={PAGE} over a tenant's {count:,} events (and a neighbour's as "
        f"many), in process, {ROUNDS * PER_ROUND} requests per case in alternating rounds; "
        f"target: p50 <= {TARGET} x the first page's (with types: the first page of that type)",
        [
            "database",
            "page",
            "p50 ms",
            "p99 ms",
            "x first",
            "met",
            "CPU p50 ms",
            "CPU x first",
        ],
        rows,
    )
    print_table(
        f"For comparison, the last page's query alone (p50 of {ROUNDS}): as the API reads it "
        f"(seq > n) and with OFFSET {count - PAGE:,}",
        ["database", "keyset ms", "OFFSET ms", "OFFSET x keyset"],
        QUERIES,
    )


if __name__ == "__main__":
    main()
