"""The browser bot end to end: a WebRTC peer (aiortc) does what its page does, over 127.0.0.1
alone; the bot answers its offer, starts the call with a real service (gunicorn, worker.py,
Redis), runs it in Pipecat with scripted speech and language services, and reports it."""

import asyncio
import json

import pytest
import requests

from tests.bridge.browser import Browser, loopback_only
from tests.bridge.stack import BrowserBot, api, call_detail, calls_of, set_up_line
from tests.system.workers import wait_until

pytestmark = pytest.mark.slow

CALLER = "+6281100000021"
DID = "+6221555501"
PROMPT = "You are the assistant of {{company}}."


@pytest.fixture(scope="module")
def bot(service):
    started = BrowserBot(
        service.log_dir,
        service.base_url,
        BOT_DID=DID,
        BOT_CALLER_NUMBER=CALLER,
        SCRIPTED_CALLERS=json.dumps({CALLER: ["Who are you?"]}),
    )
    try:
        yield started.wait()
    finally:
        started.stop()


def run(conversation) -> None:
    with loopback_only():
        asyncio.run(asyncio.wait_for(conversation, 30))


def test_a_call_from_the_page_runs_through_the_service_and_is_in_its_history(service, bot):
    line = set_up_line(
        service.base_url,
        name="browser",
        did=DID,
        agent={"name": "Reception", "systemPrompt": PROMPT, "greetingText": "Halo, Acme here."},
    )
    spoken = [
        "agent: Halo, Acme here.",
        "caller: Who are you?",
        "agent: You are the assistant of Acme.",
    ]
    seen: dict = {}

    def turns_posted() -> list[str]:
        path = f"/calls/{seen['answer']['call_id']}/transcript"
        turns = api(service.base_url, line.api_key, "GET", path)["turns"]
        return [f"{turn['role']}: {turn['text']}" for turn in turns]

    async def conversation() -> None:
        browser = Browser(bot.url, DID, variables={"company": "Acme"})
        status, seen["answer"] = await browser.call()
        assert status == 200, seen["answer"]
        await browser.connected()
        await browser.hear(since=0)  # the greeting
        await browser.hear(since=await browser.say())
        deadline = asyncio.get_running_loop().time() + 10
        while browser.turns() != spoken or await asyncio.to_thread(turns_posted) != spoken:
            assert asyncio.get_running_loop().time() < deadline, (browser.turns(), bot.logs())
            await asyncio.sleep(0.1)
        # Reported as it happens: the call is on while its turns are in the service.
        assert calls_of(service.base_url, line)[0]["status"] == "answered"
        await asyncio.sleep(1.0)  # a second of talk at least, whatever the machine's pace
        await browser.hang_up()

    run(conversation())

    def ended() -> bool:
        return calls_of(service.base_url, line)[0]["status"] == "ended"

    wait_until(ended, 15, "the call did not end", bot)
    (listed,) = calls_of(service.base_url, line)
    call = call_detail(service.base_url, line, listed["id"])
    assert call["id"] == seen["answer"]["call_id"]
    assert (call["callerNumber"], call["calleeNumber"], call["direction"]) == (
        CALLER,
        DID,
        "inbound",
    )
    assert (call["hangupReason"], call["hangupInitiator"]) == ("normal", "caller")
    assert 1 <= call["talkTimeSeconds"] <= call["durationSeconds"] and call["billedMinutes"] == 1
    assert call["transcriptSummary"].split("\n") == spoken
    assert call["metadata"]["usage"]["tts"]["characters"] > 0


def test_the_page_is_served(bot):
    response = requests.get(bot.url + "/", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert f'value="{DID}"' in response.text and "/api/offer" in response.text


def test_offers_the_bot_cannot_take_are_refused_with_the_reason(service, bot):
    answers: list = []

    async def offer() -> None:
        unanswered, elsewhere = Browser(bot.url, "+6221555599"), Browser(bot.url, DID)
        answers.append(await unanswered.call())
        answers.append(await elsewhere.call(origin="http://elsewhere.example"))
        for browser in (unanswered, elsewhere):
            await browser.hang_up()

    run(offer())
    (status, refused), (other_status, other) = answers
    # The service's reason (it recorded the call as failed)...
    assert status == 409 and refused["error"]["code"] == "no_agent", refused
    # ...another site's page, and an offer with no audio in it, which reach no service.
    assert other_status == 403 and other["error"]["code"] == "forbidden"
    garbage = {"sdp": "garbage", "type": "offer", "request_data": {"did": DID}}
    response = requests.post(bot.url + "/api/offer", json=garbage, timeout=10)
    assert response.status_code == 400 and response.json()["error"]["code"] == "bad_offer"
