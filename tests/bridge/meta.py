"""Meta's side of WhatsApp calls for the bridge's tests, on 127.0.0.1 alone.

- `FakeMeta`: one WhatsApp number at Meta: the Graph API's calling endpoint for it (served
  by the tests' fake Graph API, tests/fake_graph.py, through `graph_calls`; every request
  recorded) and Meta's webhooks for it, which it posts to the bots signed with its account's
  app secret; it hands SDPs between the bot and the WhatsApp users.
- `WhatsAppUser`: a user's phone, an aiortc peer that sends real Opus audio (silence, or a
  tone while it speaks) and records what it hears; its ICE gathers 127.0.0.1 host candidates
  only, with no STUN server, and every SDP it takes is checked to offer 127.0.0.1 alone.
- `World`: one event loop in a thread of its own for all of them, which the tests submit
  their conversations to.
"""

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from tests.bridge.browser import LOUD, Microphone, candidates, rms
from tests.receiver import Answer, Received
from voiceagent_bridge.whatsapp import sign

APP_SECRET = "meta-app-secret"
ACCESS_TOKEN = "meta-access-token"
VERIFY_TOKEN = "meta-verify-token"
WABA_ID = "waba-1"


class World:
    """An event loop in a thread: the fake Meta and the users live on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any], timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


# -- the user's phone ---------------------------------------------------------------------------


class WhatsAppUser:
    """A WhatsApp user's phone in a call: its digits, its peer, what it heard."""

    def __init__(self, digits: str) -> None:
        self.digits = digits
        self.microphone = Microphone()
        self.peer = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.heard: list[float] = []
        self.frames = 0  # audio frames received (silence included)
        self._tasks: list[asyncio.Task] = []

        @self.peer.on("track")
        def on_track(track: MediaStreamTrack) -> None:
            self._tasks.append(asyncio.create_task(self._listen(track)))

    async def offer(self) -> str:
        self.peer.addTransceiver(self.microphone, direction="sendrecv")
        await self.peer.setLocalDescription(await self.peer.createOffer())
        sdp = self.peer.localDescription.sdp
        assert set(candidates(sdp)) == {("127.0.0.1", "host")}, sdp
        return sdp

    async def take_answer(self, sdp: str) -> None:
        # Checked before ICE starts: this peer then never sends to another address.
        assert set(candidates(sdp)) == {("127.0.0.1", "host")}, sdp
        await self.peer.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="answer"))

    async def answer(self, offer: str) -> str:
        assert set(candidates(offer)) == {("127.0.0.1", "host")}, offer
        await self.peer.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
        for transceiver in self.peer.getTransceivers():
            if transceiver.kind == "audio":
                transceiver.sender.replaceTrack(self.microphone)
                transceiver.direction = "sendrecv"
        await self.peer.setLocalDescription(await self.peer.createAnswer())
        return self.peer.localDescription.sdp

    async def _listen(self, track: MediaStreamTrack) -> None:
        import array

        try:
            while True:
                frame = await track.recv()
                self.frames += 1
                if rms(array.array("h", frame.to_ndarray().tobytes())) > LOUD:
                    self.heard.append(time.monotonic())
        except MediaStreamError:
            pass

    async def connected(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.peer.connectionState != "connected":
            assert time.monotonic() < deadline, f"not connected: {self.peer.connectionState}"
            await asyncio.sleep(0.02)

    async def say(self, seconds: float = 0.3) -> float:
        self.microphone.speaking_until = time.monotonic() + seconds
        await asyncio.sleep(seconds)
        return time.monotonic()

    async def hear(self, since: float, timeout: float = 10.0, quiet: float = 0.4) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            spoken = [at for at in self.heard if at >= since]
            if spoken and time.monotonic() - spoken[-1] >= quiet:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"the agent said nothing after {since:.2f} within {timeout} s")

    async def hang_up(self) -> None:
        await self.peer.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


# -- Meta ---------------------------------------------------------------------------------------


@dataclass
class Outbound:
    """What the fake Meta does with a business-initiated call: accept, reject or ring on."""

    answer: str = "accept"  # accept | reject | ring
    user: WhatsAppUser | None = None
    call_id: str = ""
    opaque: str = ""


@dataclass
class FakeMeta:
    """A number's calling endpoint at Graph (POST /{phone_number_id}/calls) and Meta's
    webhooks about it to the bots."""

    phone_number_id: str
    display_digits: str
    app_secret: str = APP_SECRET  # its account's: Meta signs the number's webhooks with it
    bot_urls: list[str] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)  # every Graph request, in order
    users: dict[str, WhatsAppUser] = field(default_factory=dict)  # by Meta's call id
    outbound: dict[str, Outbound] = field(default_factory=dict)  # by the user's digits
    without_permission: set[str] = field(default_factory=set)  # users' digits

    def actions(self, call_id: str) -> list[str]:
        return [r["body"].get("action") for r in self.requests if r["callId"] == call_id]

    async def calls(self, number: str, authorization: str | None, body: dict) -> tuple[int, dict]:
        """Graph's answer (status, body) to a calling request for this number."""
        call_id = body.get("call_id") or ""
        self.requests.append(
            {"number": number, "authorization": authorization, "body": body, "callId": call_id}
        )
        action = body.get("action")
        if action == "connect":
            to = body["to"]
            if to in self.without_permission:
                error = {"message": "No permission", "code": 138006, "type": "OAuthException"}
                return 400, {"error": error}
            call_id = f"wacid.{uuid.uuid4().hex}"
            self.requests[-1]["callId"] = call_id
            plan = self.outbound.setdefault(to, Outbound())
            plan.call_id, plan.opaque = call_id, body.get("biz_opaque_callback_data", "")
            asyncio.get_running_loop().create_task(self._ring(plan, body["session"]["sdp"]))
            return 200, {"messaging_product": "whatsapp", "calls": [{"id": call_id}]}
        if action == "pre_accept" and call_id in self.users:
            # Media may flow from the pre-accept on, as with Meta.
            await self.users[call_id].take_answer(body["session"]["sdp"])
        return 200, {"messaging_product": "whatsapp", "success": True}

    async def _ring(self, plan: Outbound, offer: str) -> None:
        """The user's phone rings: it answers the offer, then accepts, rejects or rings on."""
        to = next(digits for digits, each in self.outbound.items() if each is plan)
        user = plan.user = WhatsAppUser(to)
        self.users[plan.call_id] = user
        sdp = await user.answer(offer)
        await self.webhook(
            self.calls_change(
                {
                    "id": plan.call_id,
                    "to": to,
                    "from": self.display_digits,
                    "event": "connect",
                    "direction": "BUSINESS_INITIATED",
                    "timestamp": str(int(time.time())),
                    "session": {"sdp_type": "answer", "sdp": sdp},
                    "biz_opaque_callback_data": plan.opaque,
                }
            )
        )
        await self.status(plan, "RINGING")
        await asyncio.sleep(0.3)
        if plan.answer == "accept":
            await self.status(plan, "ACCEPTED")
        elif plan.answer == "reject":
            await self.status(plan, "REJECTED")

    async def status(self, plan: Outbound, status: str) -> None:
        value = {
            "messaging_product": "whatsapp",
            "metadata": self.metadata,
            "statuses": [
                {
                    "id": plan.call_id,
                    "type": "call",
                    "status": status,
                    "timestamp": str(int(time.time())),
                    "recipient_id": plan.user.digits if plan.user else "",
                    "biz_opaque_callback_data": plan.opaque,
                }
            ],
        }
        await self.webhook({"field": "calls", "value": value})

    @property
    def metadata(self) -> dict:
        return {
            "display_phone_number": self.display_digits,
            "phone_number_id": self.phone_number_id,
        }

    def calls_change(self, call: dict) -> dict:
        return {
            "field": "calls",
            "value": {"messaging_product": "whatsapp", "metadata": self.metadata, "calls": [call]},
        }

    async def webhook(self, *changes: dict, bot: int = 0, secret: str | None = None) -> int:
        """Post changes to bot number bot, signed as Meta signs (with the account's app
        secret unless told); the bot's status."""
        payload = {
            "object": "whatsapp_business_account",
            "entry": [{"id": WABA_ID, "changes": list(changes)}],
        }
        body = json.dumps(payload).encode()
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"{self.bot_urls[bot]}/whatsapp/webhook",
                data=body,
                headers={
                    "Content-Type": "application/json",
                    "X-Hub-Signature-256": sign(body, secret or self.app_secret),
                },
            ) as response:
                return response.status

    async def call_in(
        self, user: WhatsAppUser, *, bot: int = 0, secret: str | None = None
    ) -> tuple[str, int]:
        """The user calls the business: Meta's connect webhook with the user's offer."""
        call_id = f"wacid.{uuid.uuid4().hex}"
        self.users[call_id] = user
        status = await self.webhook(
            self.calls_change(
                {
                    "id": call_id,
                    "from": user.digits,
                    "to": self.display_digits,
                    "event": "connect",
                    "direction": "USER_INITIATED",
                    "timestamp": str(int(time.time())),
                    "session": {"sdp_type": "offer", "sdp": await user.offer()},
                }
            ),
            bot=bot,
            secret=secret,
        )
        return call_id, status

    async def terminate(
        self,
        call_id: str,
        user: WhatsAppUser,
        *,
        duration: int,
        bot: int = 0,
        direction: str = "USER_INITIATED",
        opaque: str | None = None,
    ) -> int:
        call = {
            "id": call_id,
            "from": user.digits,
            "to": self.display_digits,
            "event": "terminate",
            "direction": direction,
            "timestamp": str(int(time.time())),
            "status": "COMPLETED",
            "duration": duration,
        }
        if opaque:
            call["biz_opaque_callback_data"] = opaque
        return await self.webhook(self.calls_change(call), bot=bot)


def graph_calls(
    loop: asyncio.AbstractEventLoop, metas: list[FakeMeta]
) -> Callable[[str, Received], Answer]:
    """The fake Graph API's calling endpoint (FakeGraph.on_calls): each request is answered
    on loop (the one the users live on) by the FakeMeta of the number it names; an unknown
    number is Graph's unknown object."""
    by_id = {meta.phone_number_id: meta for meta in metas}

    def answer(number: str, request: Received) -> Answer:
        meta = by_id.get(number)
        if meta is None:
            error = {"message": f"Unknown object {number}", "code": 100}
            status, body = 400, {"error": error}
        else:
            authorization = request.headers.get("Authorization")
            answered = meta.calls(number, authorization, request.json())
            status, body = asyncio.run_coroutine_threadsafe(answered, loop).result(60)
        headers = {"Content-Type": "application/json"}
        return Answer(status=status, body=json.dumps(body).encode(), headers=headers)

    return answer
