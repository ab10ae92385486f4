"""Ingestion: whole call lifecycles (start, answered, transcript, ended) through the runtime
API under gunicorn, on SQLite and on PostgreSQL, against the bare endpoint's request rate.

The same Python load generator (8 keep-alive clients) drives both, in alternating rounds.
Target: the runtime API's requests/s >= 0.1 x the bare endpoint's, with 0 errors and
0 "database is locked". PostgreSQL runs when BENCH_POSTGRES_URL (default
postgresql://postgres@127.0.0.1:5432/test) answers; a database is created and dropped for it.
"""

import http.client
import threading
import time
from pathlib import Path

from _harness import (
    POSTGRES_URL,
    fresh_redis,
    gunicorn,
    load_python,
    median_ratio,
    median_run,
    post_json,
    postgres_database,
    print_table,
    run_clients,
    service_env,
    temp_sqlite_url,
)
from seed import seed_tenant

ROUNDS = 3
SECONDS = 5
CONCURRENCY = 8
TARGET = 0.1
# A lifecycle lasts milliseconds, and a call may report at most its age plus 60 s: a
# duration within that, with talk time, so the end charges a minute as any answered call's.
ENDED = {
    "status": "ended",
    "durationSeconds": 45,
    "talkTimeSeconds": 40,
    "hangupReason": "normal",
    "hangupInitiator": "caller",
    "aiCostIdr": 1200,
}


def seed(database_url: str) -> None:
    from app import create_app, db
    from app.services import billing
    from app.services import tenants as tenant_service
    from app.services.audit import Actor

    app = create_app({"DATABASE_URL": database_url, "REDIS_URL": None, "QUEUE_MODE": "inline"})
    with app.app_context():
        db.upgrade()
        tenant = tenant_service.find_tenant(seed_tenant(name="bench", calls=0, agents=1).tenant_id)
        billing.grant(actor=Actor.system(), tenant=tenant, minutes=10**9)
        db.close_all()


def lifecycles(port: int, seconds: float) -> dict[str, float]:
    """Whole calls at CONCURRENCY clients for `seconds`: lifecycles/s, requests/s, errors."""
    done = [0]
    errors: list[str] = []
    lock = threading.Lock()

    def run(connection: http.client.HTTPConnection, stop_at: float) -> None:
        mine = 0
        while time.perf_counter() < stop_at:
            try:
                started = {"did": "+6221000001", "callerNumber": "+628123456789"}
                call_id = post_json(connection, "/internal/v1/calls", started)["id"]
                post_json(connection, f"/internal/v1/calls/{call_id}/answered", {})
                post_json(
                    connection,
                    f"/internal/v1/calls/{call_id}/transcript",
                    {"transcriptSummary": "The caller asked about an order."},
                )
                post_json(connection, f"/internal/v1/calls/{call_id}/ended", ENDED)
                mine += 1
            except Exception as exc:  # counted and shown, never hidden
                with lock:
                    errors.append(str(exc)[:200])
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.close()
        with lock:
            done[0] += mine

    elapsed = run_clients(run, port, CONCURRENCY, seconds)
    return {
        "lifecycles": done[0] / elapsed,
        "rps": 4 * done[0] / elapsed,
        "errors": len(errors),
        "locked": sum("database is locked" in error for error in errors),
        "first_error": errors[0] if errors else "",
    }


def measure(label: str, database_url: str) -> list[list[object]]:
    seed(database_url)
    log = Path(temp_sqlite_url().removeprefix("sqlite:///")).with_name("gunicorn.log")
    env = service_env(database_url)
    bare: list[dict[str, float]] = []
    runtime: list[dict[str, float]] = []
    for _ in range(ROUNDS):  # alternate, so drift on the machine hits both alike
        with gunicorn("bench.bare_app:app", env) as port:
            bare.append(load_python(port, "/bare", {}, seconds=SECONDS, concurrency=CONCURRENCY))
        with gunicorn("wsgi:app", env, log=log) as port:
            runtime.append(lifecycles(port, SECONDS))
    base, ours = median_run(bare), median_run(runtime)
    locked_in_log = log.read_text().count("database is locked") if log.exists() else 0
    ratio = median_ratio(runtime, bare)
    errors = sum(run["errors"] for run in runtime)
    locked = sum(run["locked"] for run in runtime) + locked_in_log
    met = ratio >= TARGET and errors == 0 and locked == 0
    first = next((run["first_error"] for run in runtime if run["first_error"]), "")
    if first:
        print(f"{label}: first error: {first}")
    return [
        [f"{label}: bare GET", f"{base['rps']:.0f}", "", "", "", "", ""],
        [
            f"{label}: call lifecycles",
            f"{ours['rps']:.0f}",
            f"{ours['lifecycles']:.0f}",
            f"{ratio:.2f}",
            errors,
            locked,
            "yes" if met else "NO",
        ],
    ]


def main() -> None:
    fresh_redis()
    rows = measure("SQLite", temp_sqlite_url())
    with postgres_database() as url:
        if url is None:
            print(f"PostgreSQL skipped: nothing answers at {POSTGRES_URL}")
        else:
            fresh_redis()
            rows += measure("PostgreSQL", url)
    print_table(
        f"Runtime API ingestion, gunicorn, {CONCURRENCY} Python keep-alive clients for both; "
        f"{ROUNDS} alternating rounds of {SECONDS} s runs (the median run; x bare: the median of "
        f"each round's ratio); target >= {TARGET} x bare req/s",
        ["database: load", "req/s", "calls/s", "x bare", "errors", "db locked", "met"],
        rows,
    )


if __name__ == "__main__":
    main()
