"""Webhook delivery: one worker process against a plain keep-alive requests loop, and the
latency from the runtime's `ended` request to the receiver's receipt of call.ended.

Throughput: 2,000 call.transcript deliveries are queued, then one `python worker.py webhooks`
sends them to a local receiver (timed from its first receipt to its last, so the worker's
start-up is left out); the baseline posts the same signed bodies with one requests.Session.
Target >= 0.3 x the plain loop. One job sends one delivery; the worker runs WEBHOOK_WORKERS
of them at once.
Latency, on an otherwise idle system: calls started, answered and ended through gunicorn,
one at a time. Targets p50 <= 50 ms, p99 <= 200 ms.
"""

import http.client
import statistics
import time

import redis
import requests
from _harness import (
    REDIS_URL,
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

DELIVERIES = 2_000
LATENCY_CALLS = 200
WARM_UP_CALLS = 3
SECRET = "whsec-bench-" + "s" * 20


def seed(database_url: str, webhook_url: str) -> str:
    """A tenant with a webhook for call.transcript and call.ended; a live call's id."""
    from app import create_app, db
    from app.services import billing, webhooks
    from app.services import tenants as tenant_service
    from app.services.audit import Actor
    from app.services.calls import lifecycle as call_lifecycle

    app = create_app({"DATABASE_URL": database_url, "REDIS_URL": None, "QUEUE_MODE": "inline"})
    app.config["ALLOW_PRIVATE_URLS"] = True
    with app.app_context():
        db.upgrade()
        tenant = tenant_service.find_tenant(seed_tenant(name="bench", calls=0, agents=1).tenant_id)
        billing.grant(actor=Actor.system(), tenant=tenant, minutes=10**6)
        webhooks.create_webhook(
            actor=Actor.system(),
            tenant=tenant,
            url=webhook_url,
            events=["call.transcript", "call.ended"],
            secret=SECRET,
        )
        call_id = call_lifecycle.start_call(
            did="+6221000001", caller_number="+628123456789"
        ).call.id
        db.close_all()
    return call_id


def queue_deliveries(database_url: str, call_id: str) -> list[tuple[bytes, dict[str, str]]]:
    """DELIVERIES events with their deliveries enqueued; the signed requests they make."""
    from app import create_app, db
    from app.models import Delivery, Event
    from app.services.calls import lifecycle as call_lifecycle
    from app.services.deliveries import wire as delivery_wire

    app = create_app(service_env(database_url))
    with app.app_context():
        for i in range(DELIVERIES):
            call_lifecycle.add_transcript(call_id=call_id, transcript_summary=f"summary {i}")
        signed = []
        for delivery in Delivery.select(Delivery, Event).join(Event):
            body = delivery_wire.event_body(delivery.event)
            headers = delivery_wire.request_headers(
                secret=SECRET,
                event_id=delivery.event.id,
                delivery_id=delivery.id,
                attempt=1,
                body=body,
                timestamp=int(time.time()),
            )
            signed.append((body, headers))
        db.close_all()
    return signed


def plain_loop(url: str, signed: list[tuple[bytes, dict[str, str]]]) -> float:
    """Deliveries per second of one keep-alive requests.Session posting the same bodies."""
    session = requests.Session()
    started = time.perf_counter()
    for body, headers in signed:
        session.post(url, data=body, headers=headers, timeout=(3, 10)).raise_for_status()
    return len(signed) / (time.perf_counter() - started)


def jobs_left() -> int:
    """Webhooks jobs waiting or running."""
    from rq import Queue
    from rq.registry import StartedJobRegistry

    connection = redis.Redis.from_url(REDIS_URL)
    left = Queue("webhooks", connection=connection).count
    return left + StartedJobRegistry("webhooks", connection=connection).count


def worker_rate(env: dict[str, str], url: str, before: int) -> tuple[float, float]:
    """Deliveries per second of one worker draining the queue, first receipt to last; and the
    seconds from the first receipt until the worker has run every job of the queue."""
    with worker(env, "webhooks"):
        deadline = time.time() + 300
        while True:
            stats = receiver_stats(url)
            if stats["count"] - before >= DELIVERIES or time.time() > deadline:
                break
            time.sleep(0.2)
        while jobs_left() and time.time() < deadline:
            time.sleep(0.2)
        drained = time.time()
    times = sorted(stats["received"][key] for key in stats["received"] if key.startswith("evt_"))
    times = times[-DELIVERIES:]
    return (len(times) - 1) / (times[-1] - times[0]), drained - times[0]


def end_to_end(port: int, url: str) -> list[float]:
    """Seconds from sending each call's `ended` to the receiver's receipt of call.ended.

    A few calls first, not measured, whose events wait for the worker to be up: the latency
    of a running system, not of a worker still starting."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    receipts(url, calls(connection, WARM_UP_CALLS))
    sent = calls(connection, LATENCY_CALLS)
    connection.close()
    received = receipts(url, sent)
    return [
        received[f"call.ended/{c}"] - t for c, t in sent.items() if f"call.ended/{c}" in received
    ]


def calls(connection: http.client.HTTPConnection, count: int) -> dict[str, float]:
    """count calls started, answered and ended one at a time; when each `ended` was sent."""
    ended = {
        "status": "ended",
        "durationSeconds": 30,
        "talkTimeSeconds": 25,
        "hangupReason": "normal",
        "hangupInitiator": "caller",
        "aiCostIdr": 100,
    }
    sent: dict[str, float] = {}
    for _ in range(count):
        started = {"did": "+6221000001", "callerNumber": "+6281234"}
        call_id = post_json(connection, "/internal/v1/calls", started)["id"]
        post_json(connection, f"/internal/v1/calls/{call_id}/answered", {})
        sent[call_id] = time.time()
        post_json(connection, f"/internal/v1/calls/{call_id}/ended", ended)
        time.sleep(0.05)  # idle between calls: one delivery at a time
    return sent


def receipts(url: str, sent: dict[str, float]) -> dict[str, float]:
    """The receiver's receipt times, once every call.ended of sent has arrived (30 s at most)."""
    deadline = time.time() + 30
    while True:
        received = receiver_stats(url)["received"]
        if all(f"call.ended/{c}" in received for c in sent) or time.time() > deadline:
            return received
        time.sleep(0.2)


def main() -> None:
    fresh_redis()
    database_url = temp_sqlite_url()
    with receiver() as url:
        call_id = seed(database_url, url)
        env = service_env(database_url)
        signed = queue_deliveries(database_url, call_id)
        # The worker first: the receiver notes each event id's first arrival, and the plain
        # loop sends the same event ids again.
        rate, drained = worker_rate(env, url, receiver_stats(url)["count"])
        plain = plain_loop(url, signed)
        with gunicorn("wsgi:app", env) as port, worker(env, "webhooks"):
            latencies = end_to_end(port, url)
    ratio = rate / plain
    p50 = statistics.median(latencies) * 1000
    p99 = percentile(latencies, 0.99) * 1000
    print_table(
        f"Webhook delivery to a local receiver: {DELIVERIES:,} deliveries; latency over "
        f"{LATENCY_CALLS} calls ended through gunicorn with one webhooks worker",
        ["measure", "value", "target", "met"],
        [
            ["plain requests.Session loop", f"{plain:.0f}/s", "", ""],
            ["one worker.py webhooks", f"{rate:.0f}/s", "", ""],
            ["worker x plain", f"{ratio:.2f}", ">= 0.3", "yes" if ratio >= 0.3 else "NO"],
            ["every job run (after the first receipt)", f"{drained:.1f} s", "", ""],
            ["ended -> receipt p50", f"{p50:.1f} ms", "<= 50 ms", "yes" if p50 <= 50 else "NO"],
            ["ended -> receipt p99", f"{p99:.1f} ms", "<= 200 ms", "yes" if p99 <= 200 else "NO"],
            ["calls delivered", f"{len(latencies)}/{LATENCY_CALLS}", "", ""],
        ],
    )


if __name__ == "__main__":
    main()
