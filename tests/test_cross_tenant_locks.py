"""No tenant's slow endpoint holds up another tenant's writes (DESIGN section 10): while tenant
A's keyed function test waits 4 s on its endpoint, tenant B's changes and the runtime's call
start answer at once, on a real multi-threaded server."""

import threading
import time

import pytest
import requests
from werkzeug.serving import make_server

from app.services import billing
from app.services import phone_numbers as number_service
from app.services.audit import Actor
from tests.receiver import Answer, Receiver

SLOW_ENDPOINT_S = 4.0
BOUND_S = 0.5
B_NUMBER = "+6221555077"


@pytest.fixture
def server(app):
    """werkzeug's threaded server (what flask run serves with) on the test's app."""
    served = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=served.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield f"http://127.0.0.1:{served.port}"
    served.shutdown()
    thread.join()


def timed_post(url: str, **kwargs) -> tuple[requests.Response, float]:
    started = time.monotonic()
    response = requests.post(url, timeout=30, **kwargs)
    return response, time.monotonic() - started


def test_a_slow_keyed_function_test_holds_up_no_other_tenant(
    server, client, headers, agent_id, other_tenant, other_headers, runtime_headers
):
    slow = Receiver(lambda request: Answer(body=b'{"ok": true}', delay=SLOW_ENDPOINT_S))
    with slow:
        function = {
            "name": "slow_lookup",
            "description": "Answers after 4 s.",
            "endpoint": slow.url + "/lookup",
            "parameters": {"type": "object", "properties": {}},
        }
        created = client.post(
            f"/api/v1/agents/{agent_id}/functions", json=function, headers=headers
        )
        assert created.status_code == 201, created.get_json()
        other_agent = client.post(
            "/api/v1/agents", json={"name": "B", "systemPrompt": "Hi."}, headers=other_headers
        ).get_json()["id"]
        number = number_service.add_number(
            tenant=other_tenant, display_number=B_NUMBER, actor=Actor.system()
        )
        number_service.assign_agent(
            tenant=other_tenant, number_id=number.id, agent_id=other_agent, actor=Actor.system()
        )
        billing.grant(tenant=other_tenant, minutes=100, actor=Actor.system())

        answers: dict[str, tuple[requests.Response, float]] = {}
        keyed = {**headers, "Idempotency-Key": "slow-test-1"}
        tester = threading.Thread(
            target=lambda: answers.setdefault(
                "test",
                timed_post(
                    f"{server}/api/v1/agents/{agent_id}/functions/slow_lookup/test",
                    json={"parameters": {}},
                    headers=keyed,
                ),
            )
        )
        tester.start()
        slow.wait_for(1)  # A's request now waits on its endpoint

        b_requests = {
            "agent": (
                f"{server}/api/v1/agents",
                {"name": "B2", "systemPrompt": "Hi."},
                other_headers,
            ),
            "webhook": (
                f"{server}/api/v1/webhooks",
                {"url": slow.url + "/hook", "events": ["call.ended"], "secret": "s" * 16},
                other_headers,
            ),
            "call": (
                f"{server}/internal/v1/calls",
                {"did": B_NUMBER, "callerNumber": "+6281234567890"},
                runtime_headers,
            ),
        }
        threads = [
            threading.Thread(
                target=lambda name=name, url=url, body=body, sent=sent: answers.setdefault(
                    name, timed_post(url, json=body, headers=sent)
                )
            )
            for name, (url, body, sent) in b_requests.items()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        tester.join(30)

    timings = {name: round(elapsed, 3) for name, (_, elapsed) in answers.items()}
    print(f"timings (s): {timings}")
    for name in b_requests:
        response, elapsed = answers[name]
        assert response.status_code == 201, (name, response.text)
        assert elapsed < BOUND_S, timings
    report, elapsed = answers["test"]
    assert report.status_code == 200 and report.json()["ok"] is True, report.text
    assert elapsed >= SLOW_ENDPOINT_S
