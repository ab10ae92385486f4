"""The example bot end to end: a fake phone speaks Twilio Media Streams to the bot over a real
websocket, the bot runs the call in Pipecat with scripted speech and language services, and
reports it to a real service (gunicorn, worker.py, Redis) whose tenant endpoints and webhooks
are real HTTP receivers on 127.0.0.1."""

import asyncio
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
import requests

from tests.bridge.conftest import Service
from tests.bridge.phone import ACCOUNT_SID, Phone
from tests.bridge.scripted import BROKEN
from tests.bridge.stack import (
    FUNCTION_SECRET,
    PARAMETERS,
    Bot,
    Line,
    api,
    call_detail,
    calls_of,
    set_up_line,
)
from tests.conftest import RUNTIME_TOKEN
from tests.receiver import Receiver
from tests.system.workers import free_port, wait_until
from voiceagent_bridge.twilio import twilio_signature

pytestmark = pytest.mark.slow

WHOLE, SLOW, LIMITED, OUTAGE = (
    "+6281100000001",
    "+6281100000002",
    "+6281100000003",
    "+6281100000004",
)
CALLERS = {
    WHOLE: ["Who are you?", 'call lookup_order {"orderId": "A-17"}', "Thank you."],
    SLOW: ['call slow_lookup {"orderId": "A-18"}', "Are you there?"],
    LIMITED: ["Hello?"],
    OUTAGE: ["Before.", 'call lookup_order {"orderId": "A-19"}', "During."],
}
GOODBYE = "Our time is up, goodbye."
# IDR: 2 a prompt token, 8 a completion token, 10 a second of speech heard, 1 a character
# spoken, 500 a minute of telephony.
PRICES = {
    "llm_input_per_million_tokens": 2e6,
    "llm_output_per_million_tokens": 8e6,
    "stt_per_minute": 600,
    "tts_per_million_characters": 1e6,
    "telephony_per_minute": 500,
}


@dataclass
class Bots:
    bot: Bot
    limited: Bot  # ends its calls after 3 s, with a goodbye
    service: Service

    def logs(self) -> str:
        """For a failure's message: the service's logs and the bots'."""
        return "\n".join((self.service.logs(), self.bot.logs(), self.limited.logs()))


@pytest.fixture(scope="module")
def bots(service):
    scripts = json.dumps(CALLERS)
    started = [
        Bot(
            service.log_dir, service.base_url, service.twilio.url, SCRIPTED_CALLERS=scripts,
            BOT_PRICES=json.dumps(PRICES),
        ),
        Bot(
            service.log_dir, service.base_url, service.twilio.url, SCRIPTED_CALLERS=scripts,
            BOT_MAX_CALL_SECONDS=3, BOT_GOODBYE_TEXT=GOODBYE,
        ),
    ]  # fmt: skip
    try:
        for bot in started:
            bot.wait()
        yield Bots(*started, service)
    finally:
        for bot in started:
            bot.stop()


def agent(**fields) -> dict:
    return {
        "name": "Reception",
        "systemPrompt": "You are the assistant of Acme.",
        "greetingText": "Halo, Acme here.",
        **fields,
    }


def lookup(name: str, endpoint: str, **fields) -> dict:
    return {
        "name": name,
        "description": "Look up an order.",
        "endpoint": endpoint,
        "parameters": PARAMETERS,
        **fields,
    }


def ended_call(bots: Bots, line: Line, timeout: float = 20) -> dict:
    """The line's one call, once it has ended."""

    def done() -> bool:
        calls = calls_of(bots.service.base_url, line)
        return len(calls) == 1 and calls[0]["status"] in ("ended", "failed", "dropped")

    wait_until(done, timeout, "the call did not end", bots)
    base_url = bots.service.base_url
    return call_detail(base_url, line, calls_of(base_url, line)[0]["id"])


def events_for(hooks: Receiver, call_id: str) -> list[str]:
    with hooks.lock:
        bodies = [request.json() for request in hooks.requests]
    return [body["event"] for body in bodies if body["data"].get("callId") == call_id]


def run(conversation) -> None:
    asyncio.run(asyncio.wait_for(conversation, 60))


def test_an_inbound_call_runs_from_the_greeting_to_its_billed_end(service, bots):
    line = set_up_line(
        service.base_url,
        name="whole",
        did="+6221555101",
        agent=agent(),
        functions=[lookup("lookup_order", service.endpoint.url + "/orders")],
        webhook_url=service.hooks.url,
    )
    phone = Phone(bots.bot.url, WHOLE, line.did)

    def turns_so_far() -> list[dict]:
        calls = calls_of(service.base_url, line)
        if not calls:
            return []
        path = f"/calls/{calls[0]['id']}/transcript"
        return api(service.base_url, line.api_key, "GET", path)["turns"]

    async def conversation() -> None:
        await phone.dial()
        greeting = await phone.hear(since=0)
        assert greeting >= len("Halo, Acme here.") * 0.01 * 0.9
        for _ in CALLERS[WHOLE]:
            await phone.hear(since=await phone.say())
        # Turns reach the service as they happen, not at the end: the call is still on.
        deadline = asyncio.get_running_loop().time() + 10
        while len(await asyncio.to_thread(turns_so_far)) < 6:
            assert asyncio.get_running_loop().time() < deadline, "turns not posted during the call"
            await asyncio.sleep(0.1)
        assert calls_of(service.base_url, line)[0]["status"] == "answered"
        await phone.hang_up()

    run(conversation())
    call = ended_call(bots, line)
    turns = api(service.base_url, line.api_key, "GET", f"/calls/{call['id']}/transcript")["turns"]
    assert [turn["seq"] for turn in turns] == list(range(1, len(turns) + 1))
    assert [f"{turn['role']}: {turn['text']}" for turn in turns] == call["transcriptSummary"].split(
        "\n"
    )
    assert (call["status"], call["hangupReason"], call["hangupInitiator"]) == (
        "ended",
        "normal",
        "caller",
    )
    assert 1 <= call["talkTimeSeconds"] <= call["durationSeconds"] and call["billedMinutes"] == 1
    assert call["transcriptSummary"].split("\n") == [
        "agent: Halo, Acme here.",
        "caller: Who are you?",
        "agent: You are the assistant of Acme.",
        'caller: call lookup_order {"orderId": "A-17"}',
        'agent: The function answered: {"orderId": "A-17", "status": "shipped"}',
        "caller: Thank you.",
        "agent: You said: Thank you.",
    ]
    usage = call["metadata"]["usage"]
    assert usage["llm"]["promptTokens"] > 0 and usage["tts"]["characters"] > 0
    assert usage["stt"]["audioSeconds"] > 0
    costs = call["costBreakdown"]
    assert costs["tts"] == usage["tts"]["characters"] and costs["telephony"] == 500
    assert costs["llm"] > 0 and costs["stt"] > 0 and costs["other"] == 0
    assert call["aiCostIdr"] == sum(costs.values())
    assert call["functionCalls"] == 1
    (request,) = [r for r in service.endpoint.requests if r.json()["callId"] == call["id"]]
    signature = hmac.new(FUNCTION_SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Service-Signature"] == f"sha256={signature}"
    assert request.json()["parameters"] == {"orderId": "A-17"}
    credits = api(service.base_url, line.api_key, "GET", "/credits")
    assert credits["balanceMinutes"] == 99 and credits["reservedMinutes"] == 0
    wait_until(
        lambda: len(events_for(service.hooks, call["id"])) >= 5, 20, "webhooks missing", bots
    )
    assert sorted(events_for(service.hooks, call["id"])) == [
        "call.answered",
        "call.ended",
        "call.started",
        "call.transcript",
        "function.called",
    ]


def test_a_function_slower_than_its_timeout_answers_function_timeout_and_the_call_goes_on(
    service, bots
):
    line = set_up_line(
        service.base_url,
        name="slow",
        did="+6221555102",
        agent=agent(),
        functions=[lookup("slow_lookup", service.endpoint.url + "/slow", timeoutMs=1000)],
    )
    phone = Phone(bots.bot.url, SLOW, line.did)
    waited: list[float] = []

    async def conversation() -> None:
        await phone.dial()
        await phone.hear(since=0)
        asked = await phone.say()
        await phone.hear(since=asked)
        # The first audio after the question: the LLM's answer to the function's error.
        waited.append(min(at for at, _ in phone.heard if at >= asked) - asked)
        await phone.hear(since=await phone.say())
        await phone.hang_up()

    run(conversation())
    call = ended_call(bots, line)
    lines = call["transcriptSummary"].split("\n")
    assert lines[1:] == [
        'caller: call slow_lookup {"orderId": "A-18"}',
        "agent: The function answered: "
        + json.dumps(
            {
                "error": {
                    "code": "function_timeout",
                    "message": "The function did not answer within 1 s.",
                }
            }
        ),
        "caller: Are you there?",
        "agent: You said: Are you there?",
    ]
    # The endpoint takes 4 s; the answer came within the 1 s budget, the service's 0.5 s
    # margin and the caller's end of turn (0.2 s of quiet, then 0.2 s), with a second to spare.
    assert waited[0] < 3.0, waited
    assert call["status"] == "ended" and call["functionCalls"] == 1


def test_a_call_is_hung_up_at_its_limit_after_the_goodbye(service, bots):
    line = set_up_line(service.base_url, name="limited", did="+6221555103", agent=agent())
    phone = Phone(bots.limited.url, LIMITED, line.did)

    async def conversation() -> None:
        await phone.dial()
        await phone.hear(since=0)
        await phone.hear(since=await phone.say())
        await asyncio.wait_for(phone.closed_by_bot.wait(), 10)
        await phone.close()

    run(conversation())
    call = ended_call(bots, line)
    assert (call["status"], call["hangupReason"], call["hangupInitiator"]) == (
        "ended",
        "max_duration",
        "system",
    )
    assert 3 <= call["talkTimeSeconds"] <= 5, call
    assert call["transcriptSummary"].split("\n")[-1] == f"agent: {GOODBYE}"
    # The bot hung the call up through Twilio's REST API (the serializer's hang-up).
    hangups = [r for r in service.twilio.requests if phone.call_sid in r.path]
    assert [(r.method, r.path, r.body) for r in hangups] == [
        ("POST", f"/2010-04-01/Accounts/{ACCOUNT_SID}/Calls/{phone.call_sid}.json",
         b"Status=completed")
    ]  # fmt: skip


def test_a_call_keeps_talking_while_the_service_is_down_and_is_reported_afterwards(service, bots):
    """gunicorn is stopped mid-call and started again after the caller hung up: the caller
    was answered all along, and the call reaches the service whole (ended, billed, its
    transcript with what was said meanwhile)."""
    port = free_port()
    base_url = service.workers.start_web(workers=1, port=port, RUNTIME_TOKEN=RUNTIME_TOKEN)
    web = service.workers.processes[-1]
    bot = Bot(service.log_dir, base_url, service.twilio.url, SCRIPTED_CALLERS=json.dumps(CALLERS))
    try:
        bot.wait()
        line = set_up_line(
            base_url,
            name="outage",
            did="+6221555104",
            agent=agent(),
            functions=[lookup("lookup_order", service.endpoint.url + "/orders")],
        )
        phone = Phone(bot.url, OUTAGE, line.did)

        async def conversation() -> None:
            await phone.dial()
            await phone.hear(since=0)
            await phone.hear(since=await phone.say())
            service.workers.kill(web)
            for _ in CALLERS[OUTAGE][1:]:
                await phone.hear(since=await phone.say())
            await phone.hang_up()

        run(conversation())
        time.sleep(2)  # the call has ended; its end waits in the bot for the service
        restarted = datetime.now(UTC)
        service.workers.start_web(workers=1, port=port, RUNTIME_TOKEN=RUNTIME_TOKEN)
        call = ended_call(bots, line, timeout=30)
    finally:
        bot.stop()
    assert (call["status"], call["hangupInitiator"], call["billedMinutes"]) == (
        "ended",
        "caller",
        1,
    )
    unavailable = {
        "error": {
            "code": "service_unavailable",
            "message": "The function could not be run just now.",
        }
    }
    assert call["transcriptSummary"].split("\n")[1:] == [
        "caller: Before.",
        "agent: You said: Before.",
        'caller: call lookup_order {"orderId": "A-19"}',
        "agent: The function answered: " + json.dumps(unavailable),
        "caller: During.",
        "agent: You said: During.",
    ]
    # It ended when the caller hung up, before the service heard of it.
    assert datetime.fromisoformat(call["endedAt"]) < restarted


def test_a_call_the_runtime_cannot_run_is_hung_up_and_reported_failed(service, bots):
    line = set_up_line(service.base_url, name="broken", did="+6221555106", agent=agent())
    phone = Phone(bots.bot.url, BROKEN, line.did)

    async def conversation() -> None:
        await phone.dial()
        await asyncio.wait_for(phone.closed_by_bot.wait(), 10)
        await phone.close()

    run(conversation())
    call = ended_call(bots, line)
    assert (call["status"], call["hangupReason"], call["hangupInitiator"]) == (
        "failed",
        "runtime_error",
        "system",
    )
    assert call["billedMinutes"] == 0 and phone.heard == []


def test_a_voice_webhook_without_twilios_signature_is_refused(service, bots):
    form = {"CallSid": "CA1", "From": WHOLE, "To": "+6221555101"}
    response = requests.post(
        bots.bot.url + "/twilio/voice",
        data=form,
        headers={"X-Twilio-Signature": twilio_signature("another-token", bots.bot.url, form)},
        timeout=10,
    )
    assert response.status_code == 403 and "<Stream" not in response.text


def test_a_media_stream_the_bot_did_not_sign_starts_no_call(service, bots):
    line = set_up_line(service.base_url, name="forged", did="+6221555105", agent=agent())
    phone = Phone(bots.bot.url, WHOLE, line.did)

    async def forge() -> None:
        stream_url = bots.bot.url.replace("http", "ws") + "/twilio/stream"
        await phone.connect(
            stream_url, {"from_number": WHOLE, "to_number": line.did, "token": "0" * 64}
        )
        await asyncio.wait_for(phone.closed_by_bot.wait(), 10)
        await phone.close()

    run(forge())
    assert phone.websocket.close_code == 4003
    assert calls_of(service.base_url, line) == [] and phone.heard == []
