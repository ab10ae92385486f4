"""Idempotency-Key against real gunicorn servers: 20 identical requests at once make one
change, and the key holds across processes and hosts (it lives in the database)."""

import threading

import pytest
import requests

from app.models import IdempotencyKey, Webhook
from tests.helpers import assert_error
from tests.system.workers import rq_config

pytestmark = pytest.mark.slow

CONCURRENT = 20
BODY = {"url": "http://127.0.0.1:9/in", "events": ["call.ended"], "secret": "s" * 16}


@pytest.fixture
def app_config(app_config, redis_url, redis_client):
    return rq_config(app_config, redis_url)  # the servers' rate-limit counters and queues


def post_at_once(url: str, headers: dict, count: int) -> list[requests.Response]:
    """count identical POSTs, each on its own connection, released together."""
    barrier = threading.Barrier(count)
    responses: list[requests.Response] = []
    lock = threading.Lock()

    def send() -> None:
        with requests.Session() as session:
            barrier.wait()
            response = session.post(url, json=BODY, headers=headers, timeout=30)
        with lock:
            responses.append(response)

    threads = [threading.Thread(target=send) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(responses) == count
    return responses


def test_twenty_identical_requests_at_once_make_one_webhook(workers, headers):
    base = workers.start_web(workers=2)
    url = f"{base}/api/v1/webhooks"
    keyed = {**headers, "Idempotency-Key": "create-hook-1"}
    responses = post_at_once(url, keyed, CONCURRENT)

    assert Webhook.select().count() == 1
    created = [r for r in responses if r.status_code == 201]
    first = [r for r in created if "Idempotent-Replayed" not in r.headers]
    assert len(first) == 1, [(r.status_code, r.text) for r in responses]
    for response in created:
        assert response.json() == first[0].json()
        assert response.headers.get("Idempotent-Replayed", "true") == "true"
    for response in responses:
        if response.status_code != 201:
            assert_error(response, 409, "idempotency_in_progress")
    assert first[0].json()["id"] == Webhook.get().id

    later = requests.post(url, json=BODY, headers=keyed, timeout=10)
    assert later.status_code == 201 and later.headers["Idempotent-Replayed"] == "true"
    assert later.json() == first[0].json()
    assert IdempotencyKey.get().state == "done"


def test_a_key_taken_on_one_host_holds_on_another(workers, headers):
    first_host = workers.start_web(workers=1)
    second_host = workers.start_web(workers=1)
    keyed = {**headers, "Idempotency-Key": "create-hook-2"}
    first = requests.post(f"{first_host}/api/v1/webhooks", json=BODY, headers=keyed, timeout=10)
    again = requests.post(f"{second_host}/api/v1/webhooks", json=BODY, headers=keyed, timeout=10)
    assert first.status_code == again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true" and again.json() == first.json()
    other = requests.post(
        f"{second_host}/api/v1/webhooks", json={**BODY, "secret": "t" * 16}, headers=keyed,
        timeout=10,
    )  # fmt: skip
    assert_error(other, 422, "idempotency_key_reused")
    assert Webhook.select().count() == 1
