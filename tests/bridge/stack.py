"""Tenants of the service the bridge's tests run against, set up through its API."""

import json
import socket
import time
from dataclasses import dataclass

import requests

from tests.workers import WEBHOOK_SECRET

PARAMETERS = {
    "type": "object",
    "properties": {"orderId": {"type": "string", "description": "Order number."}},
    "required": ["orderId"],
}
EVENTS = ["call.started", "call.answered", "call.transcript", "call.ended", "function.called"]
FUNCTION_SECRET = "bridge-function-secret"


def wait_for_port(port: int, timeout: float, what: str, logs=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{what} did not start\n{logs()}")


@dataclass
class Line:
    """A tenant's number answered by an agent, set up through the tenant API."""

    tenant_id: str
    api_key: str
    did: str
    agent_id: str


def api(base_url: str, api_key: str, method: str, path: str, **body) -> dict:
    response = requests.request(
        method, f"{base_url}/api/v1{path}", json=body or None,
        headers={"x-api-key": api_key}, timeout=10,
    )  # fmt: skip
    assert response.status_code < 300, response.text
    return response.json() if response.content else {}


def set_up_line(
    base_url: str,
    *,
    name: str,
    did: str,
    agent: dict,
    functions: list[dict] = (),
    webhook_url: str | None = None,
    minutes: int = 100,
) -> Line:
    """A tenant with an agent (and its functions) on the number did, minutes of credit and,
    when webhook_url is given, a webhook for the call events there."""
    from app.services import billing
    from app.services import keys as key_service
    from app.services import phone_numbers as number_service
    from app.services import tenants as tenant_service

    tenant = tenant_service.create_tenant(name=name, plan="business")
    key = key_service.create_key(tenant=tenant, name="bridge")[1]
    number = number_service.add_number(tenant=tenant, display_number=did)
    if minutes:
        billing.grant(tenant=tenant, minutes=minutes)
    created = api(base_url, key, "POST", "/agents", **agent)
    for function in functions:
        api(base_url, key, "POST", f"/agents/{created['id']}/functions",
            secret=FUNCTION_SECRET, **function)  # fmt: skip
    api(base_url, key, "POST", f"/phone-numbers/{number.id}/assign-agent", agentId=created["id"])
    if webhook_url:
        api(base_url, key, "POST", "/webhooks", url=webhook_url, events=EVENTS,
            secret=WEBHOOK_SECRET)  # fmt: skip
    return Line(tenant.id, key, did, created["id"])


def calls_of(base_url: str, line: Line) -> list[dict]:
    return api(base_url, line.api_key, "GET", "/calls?limit=100")["calls"]


def call_detail(base_url: str, line: Line, call_id: str) -> dict:
    return api(base_url, line.api_key, "GET", f"/calls/{call_id}")


def scripted_callers(scripts: dict[str, list[str]]) -> str:
    return json.dumps(scripts)
