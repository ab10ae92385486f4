"""Function hop: a function call through the service against a direct POST to the same endpoint.

Through the service: POST /internal/v1/calls/:id/function-calls to gunicorn, a real
`python worker.py functions` process and Redis, then the local endpoint. Direct: the same
signed body posted with requests to the same endpoint. Both in alternating batches, on an
idle system and again with 2,000 webhook deliveries queued and a webhooks worker sending them.
Target: the hop adds <= 10 ms at p50 and <= 40 ms at p99.

The direct posts go back to back, so the endpoint and the client are always running; in a
hop each process in the chain waits idle for a moment before its turn. On a virtual machine
waking an idle virtual CPU takes a while, so the table also shows, for context, the direct
post made PAUSE_S after the previous one (not part of the target).
"""

import http.client
import json
import statistics
import time

import requests
from _harness import (
    fresh_redis,
    gunicorn,
    percentile,
    post_json,
    print_table,
    receiver,
    receiver_stats,
    service_env,
    temp_sqlite_url,
    worker,
)
from seed import seed_tenant

INVOCATIONS = 500
BATCH = 50
BACKLOG = 2_000
TARGET_P50_MS, TARGET_P99_MS = 10.0, 40.0
PAUSE_S = 0.002


def seed(database_url: str, endpoint: str, webhook_url: str) -> tuple[str, dict]:
    """A live call whose agent has a function `lookup` at endpoint; also a webhook."""
    from app import create_app, db, signing
    from app.services import billing, functions, webhooks
    from app.services import tenants as tenant_service
    from app.services.audit import Actor
    from app.services.calls import lifecycle as call_lifecycle

    app = create_app({"DATABASE_URL": database_url, "REDIS_URL": None, "QUEUE_MODE": "inline"})
    app.config["ALLOW_PRIVATE_URLS"] = True
    with app.app_context():
        db.upgrade()
        seeded = seed_tenant(name="bench", calls=0, agents=1)
        tenant = tenant_service.find_tenant(seeded.tenant_id)
        billing.grant(actor=Actor.system(), tenant=tenant, minutes=10**6)
        function = functions.create_function(
            actor=Actor.system(),
            tenant=tenant,
            agent_id=seeded.agent_ids[0],
            name="lookup",
            description="Look an order up.",
            endpoint=endpoint + "/lookup",
            method="POST",
            parameters={
                "type": "object",
                "properties": {"order": {"type": "string", "description": "Order number."}},
                "required": ["order"],
            },
        )
        webhooks.create_webhook(
            actor=Actor.system(),
            tenant=tenant,
            url=webhook_url,
            events=["call.transcript"],
            secret="s" * 32,
        )
        call = call_lifecycle.start_call(did="+6221000001", caller_number="+628123456789").call
        db.close_all()
        body = {"callId": call.id, "functionName": "lookup", "parameters": {"order": "A-1"}}
        signed = json.dumps(body, separators=(",", ":")).encode()
        direct = {
            "url": function.endpoint,
            "body": signed,
            "headers": {
                "Content-Type": "application/json",
                "X-Service-Signature": signing.sign(function.signing_secret, signed),
            },
        }
        return call.id, direct


def queue_backlog(database_url: str, call_id: str, count: int) -> None:
    """count call.transcript events, each with a delivery enqueued on the webhooks queue."""
    from app import create_app, db
    from app.services.calls import lifecycle as call_lifecycle

    app = create_app(service_env(database_url))
    with app.app_context():
        for i in range(count):
            call_lifecycle.add_transcript(call_id=call_id, transcript_summary=f"summary {i}")
        db.close_all()


def measure(port: int, call_id: str, direct: dict) -> tuple[list[float], list[float], list[float]]:
    """INVOCATIONS hops, as many direct posts back to back and as many PAUSE_S apart, in
    alternating batches; seconds each."""
    service = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    session = requests.Session()
    path = f"/internal/v1/calls/{call_id}/function-calls"
    body = {"functionName": "lookup", "parameters": {"order": "A-1"}}
    hops: list[float] = []
    plain: list[float] = []
    paused: list[float] = []
    for _ in range(3):  # warm both paths
        post_json(service, path, body)
        session.post(direct["url"], data=direct["body"], headers=direct["headers"], timeout=5)
    for _ in range(INVOCATIONS // BATCH):
        for _ in range(BATCH):
            started = time.perf_counter()
            answer = post_json(service, path, body)
            hops.append(time.perf_counter() - started)
            if "result" not in answer:
                raise RuntimeError(f"function call failed: {answer}")
        for pause, times in ((0.0, plain), (PAUSE_S, paused)):
            for _ in range(BATCH):
                time.sleep(pause)
                started = time.perf_counter()
                response = session.post(
                    direct["url"], data=direct["body"], headers=direct["headers"], timeout=5
                )
                times.append(time.perf_counter() - started)
                response.raise_for_status()
    service.close()
    return hops, plain, paused


def row(label: str, hops: list[float], plain: list[float], paused: list[float]) -> list[object]:
    ms = {
        name: (statistics.median(values) * 1000, percentile(values, 0.99) * 1000)
        for name, values in (("hop", hops), ("direct", plain), ("paused", paused))
    }
    added_p50 = ms["hop"][0] - ms["direct"][0]
    added_p99 = ms["hop"][1] - ms["direct"][1]
    met = added_p50 <= TARGET_P50_MS and added_p99 <= TARGET_P99_MS
    return [
        label,
        f"{ms['direct'][0]:.2f}",
        f"{ms['hop'][0]:.2f}",
        f"{added_p50:+.2f}",
        f"{ms['direct'][1]:.2f}",
        f"{ms['hop'][1]:.2f}",
        f"{added_p99:+.2f}",
        "yes" if met else "NO",
        f"{ms['paused'][0]:.2f}",
    ]


def main() -> None:
    fresh_redis()
    database_url = temp_sqlite_url()
    rows = []
    with receiver() as endpoint, receiver() as webhook_url:
        call_id, direct = seed(database_url, endpoint, webhook_url)
        env = service_env(database_url)
        with gunicorn("wsgi:app", env) as port, worker(env, "functions"):
            rows.append(row("idle", *measure(port, call_id, direct)))
            queue_backlog(database_url, call_id, BACKLOG)
            with worker(env, "webhooks"):
                time.sleep(0.5)  # let it start on the backlog
                times = measure(port, call_id, direct)
                sent = receiver_stats(webhook_url)["count"]
            rows.append(row(f"{BACKLOG:,} deliveries queued ({sent:,} sent meanwhile)", *times))
    print_table(
        f"Function call: {INVOCATIONS} hops through gunicorn + worker.py functions + Redis vs "
        f"{INVOCATIONS} direct posts (requests), alternating batches of {BATCH}; targets "
        f"+{TARGET_P50_MS:.0f} ms p50, +{TARGET_P99_MS:.0f} ms p99",
        [
            "load",
            "direct p50",
            "hop p50",
            "added",
            "direct p99",
            "hop p99",
            "added",
            "met",
            f"direct p50, {PAUSE_S * 1000:.0f} ms apart",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
