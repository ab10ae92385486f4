"""The WhatsApp bot end to end, with no provider reachable and nothing leaving 127.0.0.1.

Two bot processes (bridge/bots/whatsapp/server.py) share one Redis for their calls' webhooks,
as two hosts behind Meta's one webhook URL would; the real service (gunicorn, worker.py) runs
the calls and answers every runtime request, the WhatsApp number lookups and events among
them. The tenants link their WhatsApp Business accounts through the tenant API, which lists
their numbers from the fake Graph API (tests/fake_graph.py, the service's
WHATSAPP_GRAPH_URL); that Graph's calling endpoint is played by a fake Meta per number
(tests/bridge/meta.py), which also posts Meta's signed webhooks; fake WhatsApp users are
aiortc peers sending Opus; Gemini Live is the real Pipecat service with a scripted client
(tests/bridge/gemini.py).
"""

import asyncio
import hashlib
import hmac
import json
import math
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from app.services.whatsapp import permissions
from tests.bridge.meta import (
    ACCESS_TOKEN,
    APP_SECRET,
    VERIFY_TOKEN,
    FakeMeta,
    Outbound,
    WhatsAppUser,
    World,
    graph_calls,
)
from tests.bridge.stack import (
    FUNCTION_SECRET,
    PARAMETERS,
    Line,
    WhatsAppBot,
    api,
    call_detail,
    calls_of,
    set_up_line,
)
from tests.fake_graph import number
from tests.system.workers import wait_until

pytestmark = pytest.mark.slow

USER = "6281200000001"  # a user who calls, then is called
LIMITED_USER = "6281200000002"
DID = "+6221777001"
POOR_DID = "+6221777002"  # a tenant without credit
NOBODY_DID = "+6221777003"  # the same tenant's, no agent answers it
# Meta's ids of the numbers.
META_ID, POOR_META_ID, NOBODY_META_ID = "1077700001", "1077700002", "1077700003"
ACME_WABA, POOR_WABA = "2077700001", "2077700002"  # the tenants' WhatsApp Business accounts
POOR_APP_SECRET = "another-meta-app-secret"  # the poor tenant's account's
ORDER_LINE = 'call lookup_order {"orderId": "WA-7"}'
CALLERS = {f"+{USER}": [ORDER_LINE], f"+{LIMITED_USER}": []}
PRICES = {
    "llm_input_per_million_tokens": 10_000,
    "llm_output_per_million_tokens": 40_000,
    "llm_input_audio_per_million_tokens": 30_000,
    "llm_output_audio_per_million_tokens": 120_000,
    "whatsapp_per_pulse": 7,
}
GOODBYE = "Time is up, goodbye."


@dataclass
class Stage:
    world: World
    meta: FakeMeta  # the number DID answers
    poor: FakeMeta
    nobody: FakeMeta
    bots: list[WhatsAppBot]
    line: Line
    gemini_log: Path
    service: object

    def logs(self) -> str:
        return "\n".join([self.service.logs(), *(bot.logs() for bot in self.bots)])

    def run(self, coroutine, timeout: float = 40):
        return self.world.run(coroutine, timeout)


def listed(did: str) -> str:
    """A number as Meta lists it ("+62 21 777001")."""
    return f"+62 21 {did.removeprefix('+6221')}"


@pytest.fixture(scope="module")
def stage(service, redis_url, tmp_path_factory):
    import aioice.ice

    # This process's WebRTC (the users) gathers host candidates on 127.0.0.1 alone.
    original = aioice.ice.get_host_addresses
    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]
    world = World()
    gemini_log = tmp_path_factory.mktemp("gemini")
    graph = service.graph
    graph.add_waba(ACME_WABA, ACCESS_TOKEN, [number(META_ID, listed(DID))])
    graph.add_waba(
        POOR_WABA,
        ACCESS_TOKEN,
        [number(POOR_META_ID, listed(POOR_DID)), number(NOBODY_META_ID, listed(NOBODY_DID))],
    )
    line = set_up_line(
        service.base_url,
        name="whatsapp",
        did=DID,
        agent={
            "name": "Reception",
            "systemPrompt": "You are the assistant of Acme.",
            "greetingText": "Halo, Acme here.",
            "voiceId": "Kore",
            "language": "id",
        },
        functions=[
            {
                "name": "lookup_order",
                "description": "Look up an order.",
                "endpoint": service.endpoint.url + "/orders",
                "parameters": PARAMETERS,
            }
        ],
        whatsapp={"wabaId": ACME_WABA, "accessToken": ACCESS_TOKEN, "appSecret": APP_SECRET},
    )
    set_up_line(
        service.base_url,
        name="whatsapp-poor",
        did=POOR_DID,
        agent={"name": "Poor", "systemPrompt": "You help."},
        minutes=0,
        whatsapp={
            "wabaId": POOR_WABA,
            "accessToken": ACCESS_TOKEN,
            "appSecret": POOR_APP_SECRET,
        },
    )
    metas = [
        FakeMeta(META_ID, DID.lstrip("+")),
        FakeMeta(POOR_META_ID, POOR_DID.lstrip("+"), app_secret=POOR_APP_SECRET),
        FakeMeta(NOBODY_META_ID, NOBODY_DID.lstrip("+"), app_secret=POOR_APP_SECRET),
    ]
    graph.on_calls = graph_calls(world.loop, metas)
    common = {
        "WHATSAPP_VERIFY_TOKEN": VERIFY_TOKEN,
        "SCRIPTED_CALLERS": json.dumps(CALLERS),
        "SCRIPTED_GEMINI_LOG": str(gemini_log),
        "BOT_REDIS_URL": redis_url,
        "BOT_PRICES": json.dumps(PRICES),
    }
    bots = [
        WhatsAppBot(
            service.log_dir, service.base_url, BOT_DISPATCH="1", BOT_NO_ANSWER_SECONDS="2",
            **common,
        ),
        WhatsAppBot(
            service.log_dir, service.base_url, BOT_MAX_CALL_SECONDS="3",
            BOT_GOODBYE_TEXT=GOODBYE, **common,
        ),
    ]  # fmt: skip
    for meta in metas:
        meta.bot_urls = [bot.url for bot in bots]
    try:
        for bot in bots:
            bot.wait()
        yield Stage(world, *metas, bots, line, gemini_log, service)
    finally:
        for bot in bots:
            bot.stop()
        graph.on_calls = None
        graph.reset()
        world.close()
        aioice.ice.get_host_addresses = original


def the_call(stage: Stage, line: Line, meta_call_id: str) -> dict:
    """The line's call of Meta's id (the bot keeps it in the call's metadata), once ended."""

    def ended():
        for call in calls_of(stage.service.base_url, line):
            if call["status"] not in ("ended", "failed", "dropped"):
                continue
            detail = call_detail(stage.service.base_url, line, call["id"])
            if detail["metadata"].get("whatsapp", {}).get("callId") == meta_call_id:
                return detail
        return None

    wait_until(lambda: ended() is not None, 20, "the call did not end", stage)
    return ended()


def test_a_users_call_is_answered_runs_a_function_and_is_billed(stage):
    user = WhatsAppUser(USER)
    seen: dict = {}

    async def conversation():
        call_id, status = await stage.meta.call_in(user)
        seen["call_id"] = call_id
        assert status == 200
        await user.connected()
        # Audio flows from the accept on, silence while the agent is quiet (Meta ends a call
        # without media).
        deadline = asyncio.get_running_loop().time() + 5
        while not user.frames:
            assert asyncio.get_running_loop().time() < deadline, "no audio from the bot"
            await asyncio.sleep(0.02)
        await user.hear(since=0)  # the greeting
        await user.hear(since=await user.say(), timeout=15)  # the function's answer
        await asyncio.sleep(1.0)
        # Meta ends the call, telling the other process: it hands it to the holder.
        assert await stage.meta.terminate(call_id, user, duration=2, bot=1) == 200
        # The user's side closes only once the call has ended by Meta's word: before that, the
        # holder would end it itself, on its own clock, when the media stops.
        await asyncio.to_thread(the_call, stage, stage.line, call_id)
        await user.hang_up()

    stage.run(conversation())
    call = the_call(stage, stage.line, seen["call_id"])
    assert (call["status"], call["hangupReason"], call["hangupInitiator"]) == (
        "ended",
        "normal",
        "caller",
    ), stage.logs()
    assert (call["callerNumber"], call["calleeNumber"], call["direction"]) == (
        f"+{USER}",
        DID,
        "inbound",
    )
    # Meta's duration: the bot takes it when it is below its own clock's (the call lived longer).
    assert call["talkTimeSeconds"] == 2
    # Graph: pre_accept then accept with the same answer, with the number's token.
    requests = [r for r in stage.meta.requests if r["callId"] == seen["call_id"]]
    assert [r["body"]["action"] for r in requests] == ["pre_accept", "accept"]
    assert requests[0]["body"]["session"] == requests[1]["body"]["session"]
    assert requests[0]["body"]["session"]["sdp_type"] == "answer"
    assert {r["authorization"] for r in requests} == {f"Bearer {ACCESS_TOKEN}"}
    assert {r["number"] for r in requests} == {META_ID}
    # The transcript, in order, from Gemini's transcriptions.
    turns = api(
        stage.service.base_url, stage.line.api_key, "GET", f"/calls/{call['id']}/transcript"
    )
    assert [f"{t['role']}: {t['text']}" for t in turns["turns"]] == [
        "agent: Halo, Acme here.",
        f"caller: {ORDER_LINE}",
        'agent: The function answered: {"orderId": "WA-7", "status": "shipped"}',
    ]
    # The function ran at the tenant's endpoint, signed.
    (request,) = [r for r in stage.service.endpoint.requests if r.json()["callId"] == call["id"]]
    signature = hmac.new(FUNCTION_SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Service-Signature"] == f"sha256={signature}"
    assert request.json()["parameters"] == {"orderId": "WA-7"}
    assert call["functionCalls"] == 1
    # Gemini Live was set up with the agent's voice, language, prompt and functions.
    sessions = [json.loads(path.read_text()) for path in stage.gemini_log.glob("*.json")]
    assert any(
        s["voice"] == "Kore"
        and s["language"] == "id-ID"
        and s["systemInstruction"].startswith("You are the assistant of Acme.")
        and "Bahasa Indonesia (id-ID)" in s["systemInstruction"]
        and s["tools"] == ["lookup_order"]
        for s in sessions
    ), sessions
    # Its usage priced: two answered turns, audio tokens at the audio prices; no telephony.
    usage = call["metadata"]["usage"]["llm"]
    assert usage == {
        "promptTokens": 2000,
        "completionTokens": 400,
        "inputAudioTokens": 1200,
        "outputAudioTokens": 300,
    }
    expected = (800 * 10_000 + 100 * 40_000 + 1200 * 30_000 + 300 * 120_000) / 1e6
    assert call["costBreakdown"]["llm"] == round(expected)
    assert call["costBreakdown"]["telephony"] == 0
    assert call["aiCostIdr"] == sum(call["costBreakdown"].values())


def test_a_call_the_service_refuses_is_rejected_at_graph(stage):
    results = []

    async def calls():
        for meta in (stage.poor, stage.nobody):
            user = WhatsAppUser("6281299999999")
            call_id, status = await meta.call_in(user)
            results.append((meta, call_id, status))
            deadline = asyncio.get_running_loop().time() + 10
            while meta.actions(call_id) != ["reject"]:
                assert asyncio.get_running_loop().time() < deadline, meta.requests
                await asyncio.sleep(0.05)
            await user.hang_up()

    stage.run(calls())
    assert [status for _, _, status in results] == [200, 200]


def test_a_webhook_with_a_bad_signature_is_refused_and_starts_nothing(stage):
    before = len(calls_of(stage.service.base_url, stage.line))

    async def forged():
        user = WhatsAppUser(USER)
        call_id, status = await stage.meta.call_in(user, secret="another-secret")
        await asyncio.sleep(1.0)
        await user.hang_up()
        return call_id, status

    call_id, status = stage.run(forged())
    assert status == 401
    assert stage.meta.actions(call_id) == []
    assert len(calls_of(stage.service.base_url, stage.line)) == before


def test_the_agents_limit_ends_the_call_with_a_goodbye_and_graph_terminate(stage):
    user = WhatsAppUser(LIMITED_USER)
    seen: dict = {}

    async def conversation():
        call_id, _ = await stage.meta.call_in(user, bot=1)
        seen["call_id"] = call_id
        await user.connected()
        deadline = asyncio.get_running_loop().time() + 15
        while "terminate" not in stage.meta.actions(call_id):
            assert asyncio.get_running_loop().time() < deadline, stage.meta.actions(call_id)
            await asyncio.sleep(0.05)
        await user.hang_up()

    stage.run(conversation())
    call = the_call(stage, stage.line, seen["call_id"])
    assert (call["status"], call["hangupReason"], call["hangupInitiator"]) == (
        "ended",
        "max_duration",
        "system",
    )
    assert stage.meta.actions(seen["call_id"]) == ["pre_accept", "accept", "terminate"]
    turns = call["transcriptSummary"].split("\n")
    assert turns[0] == "agent: Halo, Acme here." and turns[-1] == f"agent: {GOODBYE}"


def number_id(stage: Stage) -> str:
    """The service's id of the number DID."""
    numbers = api(stage.service.base_url, stage.line.api_key, "GET", "/phone-numbers")
    (phone,) = [n for n in numbers["phoneNumbers"] if n["displayNumber"] == DID]
    assert (phone["channel"], phone["whatsappPhoneNumberId"]) == ("whatsapp", META_ID)
    return phone["id"]


def place_call(stage: Stage, to: str) -> str:
    created = api(
        stage.service.base_url, stage.line.api_key, "POST", "/calls",
        phoneNumberId=number_id(stage), to=to,
    )  # fmt: skip
    return created["id"]


def place_phone_call(stage: Stage, to: str) -> str:
    """Queue a call from a phone number of the tenant (added, with the line's agent, once)."""
    from app.models import PhoneNumber, Tenant
    from app.services import phone_numbers as number_service
    from tests.helpers import ACTOR

    number = PhoneNumber.get_or_none(
        (PhoneNumber.tenant == stage.line.tenant_id) & (PhoneNumber.channel == "phone")
    ) or number_service.add_number(
        actor=ACTOR, tenant=Tenant.get_by_id(stage.line.tenant_id), display_number="+6221555499"
    )
    api(stage.service.base_url, stage.line.api_key, "POST",
        f"/phone-numbers/{number.id}/assign-agent", agentId=stage.line.agent_id)  # fmt: skip
    created = api(
        stage.service.base_url, stage.line.api_key, "POST", "/calls",
        phoneNumberId=number.id, to=to,
    )  # fmt: skip
    return created["id"]


def test_business_initiated_calls_accepted_declined_unanswered_and_without_permission(stage):
    plans = {"6281300000001": "accept", "6281300000002": "reject", "6281300000003": "ring"}
    for digits, answer in plans.items():
        stage.meta.outbound[digits] = Outbound(answer=answer)
    # Meta tells the service every user gave permission, so the calls are queued; the last
    # one's is gone by the time the bot calls: Graph's connect refuses it.
    for digits in [*plans, "6281300000004"]:
        stage.service.graph.grant(META_ID, digits, "permanent")
    stage.meta.without_permission.add("6281300000004")
    # A call from the tenant's phone number, queued first: the WhatsApp bots claim only
    # WhatsApp calls, so it stays queued for a telephony runtime.
    phone_call = place_phone_call(stage, "+6281300000009")
    ids = {digits: place_call(stage, f"+{digits}") for digits in [*plans, "6281300000004"]}

    async def accepted_conversation():
        deadline = asyncio.get_running_loop().time() + 15
        while stage.meta.outbound["6281300000001"].user is None:
            assert asyncio.get_running_loop().time() < deadline, stage.logs()
            await asyncio.sleep(0.05)
        plan = stage.meta.outbound["6281300000001"]
        await plan.user.connected()
        await plan.user.hear(since=0)  # the greeting, once accepted
        await stage.meta.terminate(
            plan.call_id, plan.user, duration=1, direction="BUSINESS_INITIATED",
            opaque=plan.opaque, bot=1,
        )  # fmt: skip
        await asyncio.sleep(0.5)
        await plan.user.hang_up()

    stage.run(accepted_conversation())

    def ended(call_id: str) -> bool:
        status = call_detail(stage.service.base_url, stage.line, call_id)["status"]
        return status in ("ended", "failed")

    for digits, call_id in ids.items():
        wait_until(lambda call_id=call_id: ended(call_id), 20, f"{digits}: not ended", stage)

    async def hang_up_the_others():
        for each in stage.meta.outbound.values():
            if each.user is not None:
                await each.user.hang_up()

    stage.run(hang_up_the_others())
    calls = {
        digits: call_detail(stage.service.base_url, stage.line, call_id)
        for digits, call_id in ids.items()
    }
    accepted = calls["6281300000001"]
    assert (accepted["status"], accepted["hangupReason"], accepted["direction"]) == (
        "ended",
        "normal",
        "outbound",
    ), stage.logs()
    assert accepted["talkTimeSeconds"] == 1  # Meta's duration
    assert accepted["costBreakdown"]["telephony"] == math.ceil(1 / 6) * PRICES["whatsapp_per_pulse"]
    connect = next(
        r
        for r in stage.meta.requests
        if r["body"].get("action") == "connect" and r["body"]["to"] == "6281300000001"
    )
    # From the number dispatch named, with its account's token.
    assert (connect["number"], connect["authorization"]) == (META_ID, f"Bearer {ACCESS_TOKEN}")
    assert connect["body"]["biz_opaque_callback_data"] == accepted["id"]
    assert connect["body"]["session"]["sdp_type"] == "offer"
    assert accepted["transcriptSummary"].split("\n")[0] == "agent: Halo, Acme here."
    declined = calls["6281300000002"]
    assert (declined["status"], declined["hangupReason"]) == ("failed", "declined")
    unanswered = calls["6281300000003"]
    assert (unanswered["status"], unanswered["hangupReason"]) == ("failed", "no_answer")
    plan = stage.meta.outbound["6281300000003"]
    assert stage.meta.actions(plan.call_id) == ["connect", "terminate"]
    refused = calls["6281300000004"]
    assert (refused["status"], refused["hangupReason"]) == ("failed", "no_call_permission")
    phone = call_detail(stage.service.base_url, stage.line, phone_call)
    assert phone["status"] == "queued", stage.logs()
    api(stage.service.base_url, stage.line.api_key, "POST", f"/calls/{phone_call}/cancel")
    # Every call ended, in the service and in the bots: none held, no task left.
    for bot in stage.bots:
        wait_until(lambda bot=bot: held(bot) == {"taking": True, "calls": 0, "tasks": 0}, 10,
                   f"{bot.url} still holds {held(bot)}", stage)  # fmt: skip


def held(bot: WhatsAppBot) -> dict:
    return requests.get(bot.url + "/healthz", timeout=10).json()


def test_messages_are_handed_to_the_service_and_the_subscription_check_answered(stage):
    reply = {
        "messaging_product": "whatsapp",
        "metadata": stage.meta.metadata,
        "messages": [
            {
                "from": USER,
                "id": "wamid.1",
                "type": "interactive",
                "interactive": {
                    "type": "call_permission_reply",
                    "call_permission_reply": {"response": "accept", "is_permanent": True},
                },
            }
        ],
    }
    assert stage.run(stage.meta.webhook({"field": "messages", "value": reply})) == 200
    # The service applied it: the number may call the user, for good.
    phone_number_id = number_id(stage)

    def granted():
        return permissions.stored(phone_number_id, f"+{USER}")

    wait_until(lambda: granted() is not None, 10, "the reply was not handed on", stage)
    assert (granted().status, granted().can_call, granted().expires_at) == (
        "permanent",
        True,
        None,
    )
    url = stage.bots[0].url + "/whatsapp/webhook"
    ok = requests.get(
        url,
        params={"hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN, "hub.challenge": "42"},
        timeout=10,
    )
    assert (ok.status_code, ok.text) == (200, "42")
    wrong = requests.get(
        url,
        params={"hub.mode": "subscribe", "hub.verify_token": "nope", "hub.challenge": "42"},
        timeout=10,
    )
    assert wrong.status_code == 403


def test_a_stopping_bot_takes_no_new_call_and_exits_once_its_call_has_ended(stage):
    """Last: it stops the first bot. Its call goes on after SIGTERM; Meta's terminate, sent to
    the other bot, is handed to it over Redis; then it exits."""
    holder = stage.bots[0]
    user = WhatsAppUser(USER)

    async def call_in() -> str:
        call_id, status = await stage.meta.call_in(user)
        assert status == 200
        await user.connected()
        await user.hear(since=0)  # the greeting
        return call_id

    call_id = stage.run(call_in())
    holder.process.send_signal(signal.SIGTERM)
    time.sleep(2.0)
    assert holder.process.poll() is None, holder.logs()  # still up: its call goes on

    async def hang_up() -> None:
        assert await stage.meta.terminate(call_id, user, duration=2, bot=1) == 200
        await asyncio.sleep(0.5)
        await user.hang_up()

    stage.run(hang_up())
    # Uvicorn ends by raising the signal it caught again, once it has shut down.
    assert holder.process.wait(timeout=20) in (0, -signal.SIGTERM), holder.logs()
    assert "Application shutdown complete" in holder.logs()
    call = the_call(stage, stage.line, call_id)
    assert (call["status"], call["hangupReason"], call["talkTimeSeconds"]) == (
        "ended",
        "normal",
        2,
    )
