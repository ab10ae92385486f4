"""The example bot's outbound side, in process: a claimed call is dialled through Twilio's
REST API (a real HTTP receiver standing in for it), and reported failed when unanswered.

The service's dispatch hands out calls and sessions as a start does; until it does, a call
started as outbound through the runtime API stands in for a claimed one.
"""

import asyncio
import base64
import xml.etree.ElementTree as ET
from urllib.parse import parse_qsl

import pytest

from tests.bridge.phone import ACCOUNT_SID, AUTH_TOKEN
from tests.bridge.stack import call_detail, set_up_line
from tests.conftest import RUNTIME_TOKEN
from voiceagent_bridge.client import DispatchedCall, RuntimeClient
from voiceagent_bridge.twilio_bot import Bot, BotSettings, stream_token

pytestmark = pytest.mark.slow

CALLEE = "+6281300000001"


def test_a_claimed_call_is_dialled_through_twilio_and_reported_failed_when_unanswered(service):
    line = set_up_line(
        service.base_url,
        name="dialer",
        did="+6221555401",
        agent={"name": "Sales", "systemPrompt": "Sell."},
    )
    settings = BotSettings(
        service_url=service.base_url,
        runtime_token=RUNTIME_TOKEN,
        public_url="https://bot.example.test",
        twilio_account_sid=ACCOUNT_SID,
        twilio_auth_token=AUTH_TOKEN,
        twilio_api_url=service.twilio.url,
    )

    async def dial():
        async with RuntimeClient(service.base_url, RUNTIME_TOKEN) as client:
            claimed = await client.start_call(
                did=line.did, caller_number=CALLEE, direction="outbound"
            )
            bot = Bot(settings, factory=lambda call, session: None, client=client)
            await bot.dial(DispatchedCall(claimed.call, claimed.session))
            dialling = set(bot.dialing)
            await bot.unanswered(claimed.call.id, "no_answer")
            return claimed.call.id, dialling, set(bot.dialing)

    call_id, dialling, after = asyncio.run(dial())
    assert dialling == {call_id} and after == set()
    (request,) = [r for r in service.twilio.requests if r.path.endswith("/Calls.json")]
    assert request.path == f"/2010-04-01/Accounts/{ACCOUNT_SID}/Calls.json"
    credentials = base64.b64encode(f"{ACCOUNT_SID}:{AUTH_TOKEN}".encode()).decode()
    assert request.headers["Authorization"] == f"Basic {credentials}"
    form = dict(parse_qsl(request.body.decode()))
    assert (form["To"], form["From"]) == (CALLEE, line.did)
    assert form["StatusCallback"] == f"https://bot.example.test/twilio/status?call_id={call_id}"
    stream = ET.fromstring(form["Twiml"]).find("./Connect/Stream")
    assert stream.get("url") == "wss://bot.example.test/twilio/stream"
    assert {p.get("name"): p.get("value") for p in stream} == {
        "call_id": call_id,
        "token": stream_token(AUTH_TOKEN, "outbound", call_id),
    }
    call = call_detail(service.base_url, line, call_id)
    assert (call["direction"], call["status"], call["hangupReason"]) == (
        "outbound",
        "failed",
        "no_answer",
    )
    assert call["hangupInitiator"] == "callee" and call["billedMinutes"] == 0
