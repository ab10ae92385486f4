"""Scaling of GET /api/v1/calls, a call's detail and its transcript: p50 at 10,000 calls
against p50 at 1,000,000 for a tenant.

Both tenants live in the same SQLite file, so the only difference is how many calls the
tenant has. Each case is requested in alternating rounds through the app (in process, one
request at a time). Target: the 1,000,000-call p50 <= 1.3 x the 10,000-call p50.

The CPU columns time the same requests with the thread's CPU clock, which leaves out the
time other processes of the machine held the core (not what a hypervisor takes, nor slower
caches): a CPU ratio near 1 beside a high wall ratio means noise, not scaling.

Both tenants have the same shape (calls spread evenly over 4 agents and 2 versions of each,
3 of 5 ended, one call in 100 with a conversation of 20 turns: 10,000 conversations and
200,000 turns beside the 1,000,000 calls), and the detail and transcript cases read a call
with its 20 turns. A filtered total is counted only up to COUNT_LIMIT (10,000) rows: at
10,000 calls every filter matches fewer (agentId 2,500: counted in full), at 1,000,000 the
count stops at 10,000 (an index range scan of that many entries). That bounded scan is the
one cost that differs.

Usage: python bench/calls_list.py [SMALL] [LARGE]   (default 10,000 and 1,000,000)
"""

import logging
import statistics
import sys
import time

from _harness import percentile, print_table, temp_sqlite_url
from seed import seed_tenant

ROUNDS = 30
PER_ROUND = 10
TARGET = 1.3


def main() -> None:
    from app import create_app, db

    small = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    large = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    app = create_app({"DATABASE_URL": temp_sqlite_url(), "REDIS_URL": None, "QUEUE_MODE": "inline"})
    logging.getLogger("app.requests").setLevel(logging.WARNING)  # no line per request
    app.logger.disabled = True
    with app.app_context():
        db.upgrade()
        began = time.perf_counter()
        tenants = {
            small: seed_tenant(name="small", calls=small, number="+6221000001"),
            large: seed_tenant(name="large", calls=large, number="+6221000002"),
        }
        print(f"seeded {small + large:,} calls in {time.perf_counter() - began:.0f} s")
    cases = {
        "newest page": lambda seeded, count: "/api/v1/calls?limit=50",
        "status=ended": lambda seeded, count: "/api/v1/calls?limit=50&status=ended",
        "agentId=…": lambda seeded, count: f"/api/v1/calls?limit=50&agentId={seeded.agent_ids[0]}",
        "agentId=…&agentVersion=2": lambda seeded, count: (
            f"/api/v1/calls?limit=50&agentId={seeded.agent_ids[0]}&agentVersion=2"
        ),
        "offset=5000": lambda seeded, count: "/api/v1/calls?limit=50&offset=5000",
        "call detail": lambda seeded, count: f"/api/v1/calls/{seeded.call_with_turns(count)}",
        "transcript (20 turns)": lambda seeded, count: (
            f"/api/v1/calls/{seeded.call_with_turns(count)}/transcript"
        ),
    }
    client = app.test_client()
    times: dict[tuple[str, int], list[float]] = {(c, n): [] for c in cases for n in tenants}
    cpu: dict[tuple[str, int], list[float]] = {(c, n): [] for c in cases for n in tenants}
    for _ in range(ROUNDS):  # alternate, so drift on the machine hits both sizes alike
        for case, path_of in cases.items():
            for count, seeded in tenants.items():
                path, headers = path_of(seeded, count), {"x-api-key": seeded.key}
                for _ in range(PER_ROUND):
                    started, started_cpu = time.perf_counter(), time.thread_time()
                    response = client.get(path, headers=headers)
                    cpu[case, count].append(time.thread_time() - started_cpu)
                    times[case, count].append(time.perf_counter() - started)
                    assert response.status_code == 200, response.get_data(as_text=True)
                    if case.startswith("transcript"):
                        assert len(response.get_json()["turns"]) == 20
    rows = []
    for case in cases:
        p50 = {count: statistics.median(times[case, count]) * 1000 for count in tenants}
        cpu50 = {count: statistics.median(cpu[case, count]) * 1000 for count in tenants}
        ratio = p50[large] / p50[small]
        rows.append(
            [
                case,
                f"{p50[small]:.2f}",
                f"{p50[large]:.2f}",
                f"{percentile(times[case, large], 0.99) * 1000:.2f}",
                f"{ratio:.2f}",
                "yes" if ratio <= TARGET else "NO",
                f"{cpu50[small]:.2f}",
                f"{cpu50[large]:.2f}",
                f"{cpu50[large] / cpu50[small]:.2f}",
            ]
        )
    print_table(
        f"GET /api/v1/calls?limit=50, /calls/:id and /calls/:id/transcript in process, "
        f"{ROUNDS * PER_ROUND} requests per cell in alternating rounds; target p50 ratio "
        f"<= {TARGET}",
        [
            "request",
            f"p50 ms {small:,}",
            f"p50 ms {large:,}",
            "p99 ms large",
            "ratio",
            "met",
            f"CPU p50 ms {small:,}",
            f"CPU p50 ms {large:,}",
            "CPU ratio",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
