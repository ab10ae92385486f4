"""The real things a bridge test runs against: the service (gunicorn, worker.py, Redis, a
database), tenants set up through its API, and the example bots, each as its own process."""

import json
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from tests.bridge.phone import ACCOUNT_SID, AUTH_TOKEN
from tests.conftest import RUNTIME_TOKEN
from tests.helpers import ACTOR
from tests.system.workers import ROOT, WEBHOOK_SECRET, Workers, free_port

PARAMETERS = {
    "type": "object",
    "properties": {"orderId": {"type": "string", "description": "Order number."}},
    "required": ["orderId"],
}
EVENTS = ["call.started", "call.answered", "call.transcript", "call.ended", "function.called"]
FUNCTION_SECRET = "bridge-function-secret"
TWILIO_BOT = ROOT / "bridge" / "bots" / "twilio"
WEBRTC_BOT = ROOT / "bridge" / "bots" / "webrtc"
WHATSAPP_BOT = ROOT / "bridge" / "bots" / "whatsapp"


def wait_for_port(port: int, timeout: float, what: str, logs=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{what} did not start\n{logs()}")


class BotProcess:
    """A bot of bridge/bots/ (its server.py) as its own process on a free port of 127.0.0.1,
    with the scripted services."""

    folder: Path

    def __init__(self, log_dir: Path, **settings) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log_dir / f"bot-{self.folder.name}-{self.port}.log"
        # Every setting the bot reads, blank unless a test gives it: a .env left beside the
        # bot sets none of them here.
        names = re.findall(r"^([A-Z_]+)=", (self.folder / "env.example").read_text(), re.M)
        env = {
            **os.environ,
            **dict.fromkeys(names, ""),
            # The scripted services are in tests/.
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "RUNTIME_TOKEN": RUNTIME_TOKEN,
            "BOT_SERVICES": "tests.bridge.scripted:services",
            **self.own_settings(),
            **{name: str(value) for name, value in settings.items()},
        }
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(self.folder / "server.py"), "--port", str(self.port)],
                cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True,
            )  # fmt: skip

    def own_settings(self) -> dict[str, str]:
        """The settings this kind of bot needs (it knows its port by then)."""
        return {}

    def wait(self, timeout: float = 60) -> "BotProcess":
        wait_for_port(self.port, timeout, f"the {self.folder.name} bot", self.logs)
        return self

    def logs(self, tail: int = 6000) -> str:
        return self.log.read_text()[-tail:]

    def stop(self) -> None:
        """Kill it: a graceful stop would wait for calls still open, which a test has no use
        for."""
        Workers.kill(self.process)


class Bot(BotProcess):
    """The Twilio bot (bridge/bots/twilio/server.py)."""

    folder = TWILIO_BOT

    def __init__(self, log_dir: Path, service_url: str, twilio_api_url: str, **settings) -> None:
        self.service_url = service_url
        self.twilio_api_url = twilio_api_url
        super().__init__(log_dir, **settings)

    def own_settings(self) -> dict[str, str]:
        return {
            "SERVICE_URL": self.service_url,
            "PUBLIC_URL": self.url,
            "TWILIO_ACCOUNT_SID": ACCOUNT_SID,
            "TWILIO_AUTH_TOKEN": AUTH_TOKEN,
            "TWILIO_API_URL": self.twilio_api_url,
        }


class BrowserBot(BotProcess):
    """The browser bot (bridge/bots/webrtc/server.py), on 127.0.0.1 as by default."""

    folder = WEBRTC_BOT

    def __init__(self, log_dir: Path, service_url: str, **settings) -> None:
        super().__init__(log_dir, SERVICE_URL=service_url, **settings)


class WhatsAppBot(BotProcess):
    """The WhatsApp bot (bridge/bots/whatsapp/server.py), its media on 127.0.0.1 only, with
    the scripted Gemini Live."""

    folder = WHATSAPP_BOT

    def __init__(self, log_dir: Path, service_url: str, **settings) -> None:
        super().__init__(
            log_dir,
            SERVICE_URL=service_url,
            BOT_SERVICES="tests.bridge.gemini:services",
            BOT_MEDIA_ADDRESSES="127.0.0.1",
            **settings,
        )


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
    whatsapp: dict | None = None,
) -> Line:
    """A tenant with an agent (and its functions) on the number did, minutes of credit and,
    when webhook_url is given, a webhook for the call events there. With whatsapp (the body
    of a link: wabaId, accessToken, appSecret) the tenant links that WhatsApp Business
    account, whose numbers the service's Graph API lists, and did is one of them; else did is
    added as a phone number."""
    from app.services import billing
    from app.services import keys as key_service
    from app.services import phone_numbers as number_service
    from app.services import tenants as tenant_service

    tenant = tenant_service.create_tenant(actor=ACTOR, name=name, plan="business")
    key = key_service.create_key(actor=ACTOR, tenant=tenant, name="bridge")[1]
    if whatsapp is None:
        number_id = number_service.add_number(actor=ACTOR, tenant=tenant, display_number=did).id
    else:
        linked = api(base_url, key, "POST", "/whatsapp/accounts", **whatsapp)
        (number_id,) = [n["id"] for n in linked["numbers"] if n["displayNumber"] == did]
    if minutes:
        billing.grant(actor=ACTOR, tenant=tenant, minutes=minutes)
    created = api(base_url, key, "POST", "/agents", **agent)
    for function in functions:
        api(base_url, key, "POST", f"/agents/{created['id']}/functions",
            secret=FUNCTION_SECRET, **function)  # fmt: skip
    api(base_url, key, "POST", f"/phone-numbers/{number_id}/assign-agent", agentId=created["id"])
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
