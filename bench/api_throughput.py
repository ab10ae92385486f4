"""API throughput: the bare Flask endpoint against GET /api/v1/agents and GET /api/v1/calls.

Same gunicorn settings for all three; the tenant has 5 agents and 1,000,000 calls, the rate
limiter counts every request in Redis. Targets: agents >= 0.3 x bare req/s, calls list
>= 0.15 x bare, p99 of both <= 3 x bare's p99.

Usage: python bench/api_throughput.py [CALLS]   (default 1,000,000)
"""

import sys
import time

from _harness import (
    GUNICORN,
    LOAD_GENERATOR,
    fresh_redis,
    gunicorn,
    load,
    median_ratio,
    median_run,
    print_table,
    service_env,
    temp_sqlite_url,
)
from seed import seed_tenant

ROUNDS = 5
SECONDS = 4
CONCURRENCY = 8


def seed(database_url: str, calls: int) -> str:
    from app import create_app, db

    app = create_app({"DATABASE_URL": database_url, "REDIS_URL": None, "QUEUE_MODE": "inline"})
    with app.app_context():
        db.upgrade()
        key = seed_tenant(name="bench", calls=calls, agents=5).key
        db.close_all()
    return key


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    fresh_redis()
    database_url = temp_sqlite_url()
    began = time.perf_counter()
    headers = {"x-api-key": seed(database_url, calls)}
    print(f"seeded {calls:,} calls in {time.perf_counter() - began:.0f} s")
    cases = {
        "bare Flask JSON": ("bench.bare_app:app", "/bare"),
        "GET /api/v1/agents": ("wsgi:app", "/api/v1/agents"),
        "GET /api/v1/calls?limit=50": ("wsgi:app", "/api/v1/calls?limit=50"),
    }
    runs: dict[str, list[dict[str, float]]] = {label: [] for label in cases}
    env = service_env(database_url, RATELIMIT_ENABLED="true")
    for _ in range(ROUNDS):  # alternate, so drift on the machine hits every case alike
        for app_path in ("bench.bare_app:app", "wsgi:app"):
            with gunicorn(app_path, env) as port:
                for label, (served_by, path) in cases.items():
                    if served_by == app_path:
                        runs[label].append(
                            load(port, path, headers, seconds=SECONDS, concurrency=CONCURRENCY)
                        )
    results = {label: median_run(found) for label, found in runs.items()}
    base = runs["bare Flask JSON"]
    targets = {"GET /api/v1/agents": 0.3, "GET /api/v1/calls?limit=50": 0.15}
    rows = []
    for label, r in results.items():
        ratio = median_ratio(runs[label], base)
        p99_ratio = median_ratio(runs[label], base, "p99_ms")
        target = targets.get(label)
        met = "" if target is None else ("yes" if ratio >= target and p99_ratio <= 3 else "NO")
        rows.append(
            [
                label,
                f"{r['rps']:.0f}",
                f"{ratio:.2f}" + ("" if target is None else f" (>= {target})"),
                f"{r['p50_ms']:.2f}",
                f"{r['p99_ms']:.2f}",
                f"{p99_ratio:.2f}" + ("" if target is None else " (<= 3)"),
                int(r["errors"]),
                met,
            ]
        )
    print_table(
        f"gunicorn {GUNICORN}, {CONCURRENCY} keep-alive {LOAD_GENERATOR} clients, "
        f"rate limiter on (Redis), {calls:,} calls; "
        f"{ROUNDS} alternating rounds of {SECONDS} s runs: the median run's figures, and the "
        "median of each round's ratio to its bare run",
        ["endpoint", "req/s", "x bare", "p50 ms", "p99 ms", "p99 x bare", "errors", "met"],
        rows,
    )


if __name__ == "__main__":
    main()
