"""Rate limiter overhead: GET /api/v1/agents with and without the limiter, same gunicorn.

Target: the limiter (counters in Redis) costs at most 10 % of throughput.
"""

from _harness import (
    GUNICORN,
    LOAD_GENERATOR,
    fresh_redis,
    gunicorn,
    load,
    median_ratio,
    median_run,
    print_table,
    temp_sqlite_url,
)

ROUNDS = 5


def seed(database_url: str) -> str:
    from app import create_app, db
    from app.services import agents, keys, tenants
    from app.services.audit import Actor

    app = create_app({"DATABASE_URL": database_url, "REDIS_URL": None})
    with app.app_context():
        db.upgrade()
        tenant = tenants.create_tenant(
            actor=Actor.system(),
            name="bench",
            plan="enterprise",
            rate_limit=10**9,
            concurrent_calls=10**6,
        )
        for i in range(5):
            agents.create_agent(
                actor=Actor.system(), tenant=tenant, name=f"Agent {i}", system_prompt="Be brief."
            )
        return keys.create_key(actor=Actor.system(), tenant=tenant, name="bench")[1]


def main() -> None:
    redis_url = fresh_redis()
    database_url = temp_sqlite_url()
    key = seed(database_url)
    headers = {"x-api-key": key}
    configurations = {"limiter off": "false", "limiter on (Redis)": "true"}
    runs: dict[str, list[dict[str, float]]] = {label: [] for label in configurations}
    for _ in range(ROUNDS):  # alternate, so drift on the machine hits both alike
        for label, enabled in configurations.items():
            env = {
                "DATABASE_URL": database_url,
                "REDIS_URL": redis_url,
                "QUEUE_MODE": "inline",
                "RATELIMIT_ENABLED": enabled,
            }
            with gunicorn("wsgi:app", env) as port:
                runs[label].append(load(port, "/api/v1/agents", headers, seconds=4))
    results = {label: median_run(found) for label, found in runs.items()}
    ratios = {label: median_ratio(found, runs["limiter off"]) for label, found in runs.items()}
    rows = [
        [
            label,
            f"{r['rps']:.0f}",
            f"{ratios[label]:.2f}",
            f"{r['p50_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
            r["errors"],
        ]
        for label, r in results.items()
    ]
    print_table(
        f"GET /api/v1/agents (5 agents), gunicorn {GUNICORN}, "
        f"8 keep-alive {LOAD_GENERATOR} clients, {ROUNDS} alternating rounds of 4 s runs: "
        "the median run, and the median of each round's ratio",
        ["configuration", "req/s", "ratio", "p50 ms", "p99 ms", "errors"],
        rows,
    )
    cost = 1 - ratios["limiter on (Redis)"]
    print(f"\nlimiter cost: {cost:.1%} of throughput (target <= 10 %)")


if __name__ == "__main__":
    main()
