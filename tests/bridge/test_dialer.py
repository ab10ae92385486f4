"""The example bot's outbound side: a call queued through the tenant API is claimed from the
service's dispatch and dialled through Twilio's REST API (a real HTTP receiver standing in for
it); reported failed when unanswered, and run to its billed end when the callee's phone (the
fake phone, speaking Media Streams over a real websocket) answers."""

import asyncio
import base64
import json
import xml.etree.ElementTree as ET
from urllib.parse import parse_qsl

import pytest

from tests.bridge import stack
from tests.bridge.phone import ACCOUNT_SID, AUTH_TOKEN, Phone
from tests.bridge.stack import api, call_detail, set_up_line
from tests.conftest import RUNTIME_TOKEN
from tests.system.workers import wait_until
from voiceagent_bridge.client import RuntimeClient
from voiceagent_bridge.twilio import TwilioAccount, TwilioLine, stream_token

pytestmark = pytest.mark.slow

CALLEE = "+6281300000001"


def place_call(base_url, line, to, **fields) -> str:
    """Queue an outbound call from the line's number through the tenant API; its id."""
    (number,) = api(base_url, line.api_key, "GET", "/phone-numbers")["phoneNumbers"]
    return api(
        base_url, line.api_key, "POST", "/calls", phoneNumberId=number["id"], to=to, **fields
    )["id"]


def test_a_claimed_call_is_dialled_through_twilio_and_reported_failed_when_unanswered(service):
    line = set_up_line(
        service.base_url,
        name="dialer",
        did="+6221555401",
        agent={"name": "Sales", "systemPrompt": "Sell."},
    )
    account = TwilioAccount(ACCOUNT_SID, AUTH_TOKEN, service.twilio.url)

    place_call(service.base_url, line, CALLEE)

    async def dial():
        async with RuntimeClient(service.base_url, RUNTIME_TOKEN) as client:
            (claimed,) = await client.dispatch(max_calls=1)
            assert claimed.call.status == "ringing"
            twilio = TwilioLine(client, account, "https://bot.example.test")
            await twilio.dial(claimed)
            dialling = set(twilio.dialing)
            await twilio.unanswered(claimed.call.id, "no_answer")
            return claimed.call.id, dialling, set(twilio.dialing)

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


def test_a_claim_naming_a_channel_takes_only_calls_from_its_numbers(service):
    line = set_up_line(
        service.base_url,
        name="channels",
        did="+6221555409",
        agent={"name": "Sales", "systemPrompt": "Sell."},
    )
    call_id = place_call(service.base_url, line, CALLEE)

    async def claim():
        async with RuntimeClient(service.base_url, RUNTIME_TOKEN) as client:
            whatsapp = await client.dispatch(max_calls=50, channel="whatsapp")
            phone = await client.dispatch(max_calls=50, channel="phone")
            return whatsapp, phone

    whatsapp, phone = asyncio.run(claim())
    assert call_id not in [each.call.id for each in whatsapp]
    assert call_id in [each.call.id for each in phone]
    assert {each.channel for each in phone} == {"phone"}
    for each in phone:  # nobody dials them: reported unanswered
        asyncio.run(report_unanswered(service.base_url, each.call.id))


async def report_unanswered(base_url: str, call_id: str) -> None:
    async with RuntimeClient(base_url, RUNTIME_TOKEN) as client:
        await client.end_call(
            call_id,
            status="failed",
            duration_seconds=0,
            talk_time_seconds=0,
            hangup_reason="no_answer",
            hangup_initiator="callee",
        )


ANSWERING = "+6281300000002"


def test_a_call_from_dispatch_is_dialled_answered_and_billed(service):
    line = set_up_line(
        service.base_url,
        name="dispatched",
        did="+6221555402",
        agent={"name": "Clinic", "systemPrompt": "Remind.", "greetingText": "Halo {{name}}!"},
    )
    bot = stack.Bot(
        service.log_dir,
        service.base_url,
        service.twilio.url,
        BOT_DISPATCH="1",
        SCRIPTED_CALLERS=json.dumps({ANSWERING: ["Yes, I will come."]}),
    ).wait()
    try:
        call_id = place_call(service.base_url, line, ANSWERING, variables={"name": "Budi"})

        def dialled():
            return [
                r
                for r in service.twilio.requests
                if dict(parse_qsl(r.body.decode())).get("To") == ANSWERING
            ]

        wait_until(lambda: dialled(), 20, "the bot did not dial the queued call", service.workers)
        form = dict(parse_qsl(dialled()[0].body.decode()))
        stream = ET.fromstring(form["Twiml"]).find("./Connect/Stream")
        parameters = {each.get("name"): each.get("value") for each in stream}
        assert parameters["call_id"] == call_id
        # The callee picks up: Twilio opens the media stream the TwiML names.
        phone = Phone(bot.url, ANSWERING, line.did)

        async def conversation():
            await phone.connect(stream.get("url"), parameters)
            await phone.hear(since=0)
            await phone.hear(since=await phone.say())
            await phone.hang_up()

        asyncio.run(asyncio.wait_for(conversation(), 60))

        def ended():
            return call_detail(service.base_url, line, call_id)["status"] == "ended"

        wait_until(ended, 20, "the call did not end:\n" + bot.logs(), service.workers)
    finally:
        bot.stop()
    call = call_detail(service.base_url, line, call_id)
    assert (call["direction"], call["calleeNumber"], call["callerNumber"]) == (
        "outbound",
        ANSWERING,
        line.did,
    )
    assert call["answeredAt"] is not None and call["billedMinutes"] == 1
    assert call["transcriptSummary"].split("\n")[:2] == [
        "agent: Halo Budi!",
        "caller: Yes, I will come.",
    ]
