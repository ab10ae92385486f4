"""A fake phone on Twilio's side of a call: the voice webhook Twilio posts, and the Media
Streams websocket it opens with the TwiML's answer (connected, start, a media frame every
20 ms, stop), JSON over a real websocket to the bot."""

import asyncio
import base64
import json
import math
import time
import uuid
import xml.etree.ElementTree as ET

import aiohttp
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from voiceagent_bridge.twilio import twilio_signature

ACCOUNT_SID = "AC" + "0" * 32
AUTH_TOKEN = "twilio-test-auth-token"
FRAME_MS = 20
FRAME_BYTES = 8000 * FRAME_MS // 1000  # 8 kHz mu-law: one byte a sample


def ulaw(sample: int) -> int:
    """G.711 mu-law of a 16-bit sample."""
    bias, clip = 0x84, 32635
    sign = 0x80 if sample < 0 else 0
    sample = min(abs(sample), clip) + bias
    exponent = max(0, int(math.log2(sample)) - 7)
    mantissa = (sample >> (exponent + 3)) & 0x0F
    return ~(sign | (exponent << 4) | mantissa) & 0xFF


SILENCE = bytes([ulaw(0)]) * FRAME_BYTES
TONE = bytes(ulaw(int(12000 * math.sin(2 * math.pi * 300 * i / 8000))) for i in range(FRAME_BYTES))


class Phone:
    """One call from a caller to a number, through the bot at bot_url (its PUBLIC_URL)."""

    def __init__(self, bot_url: str, caller: str, did: str) -> None:
        self.bot_url = bot_url
        self.caller = caller
        self.did = did
        self.call_sid = "CA" + uuid.uuid4().hex
        self.stream_sid = "MZ" + uuid.uuid4().hex
        self.websocket: ClientConnection | None = None
        self.heard: list[tuple[float, int]] = []  # (monotonic time, bytes) of audio received
        self.events: list[dict] = []  # every other message the bot sent
        self.closed_by_bot = asyncio.Event()
        self._speaking_until = 0.0
        self._tasks: list[asyncio.Task] = []

    async def dial(self) -> None:
        """Post the voice webhook as Twilio does, then open the stream its TwiML names."""
        form = {
            "AccountSid": ACCOUNT_SID,
            "CallSid": self.call_sid,
            "From": self.caller,
            "To": self.did,
            "CallStatus": "ringing",
            "Direction": "inbound",
        }
        url = self.bot_url + "/twilio/voice"
        headers = {"X-Twilio-Signature": twilio_signature(AUTH_TOKEN, url, form)}
        async with aiohttp.ClientSession() as http:
            async with http.post(url, data=form, headers=headers) as response:
                assert response.status == 200, await response.text()
                twiml = await response.text()
        stream = ET.fromstring(twiml).find("./Connect/Stream")
        assert stream is not None, twiml
        parameters = {each.get("name"): each.get("value") for each in stream.findall("Parameter")}
        await self.connect(stream.get("url"), parameters)

    async def connect(self, url: str, parameters: dict) -> None:
        self.websocket = await connect(url)
        await self.send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self.send(
            {
                "event": "start",
                "sequenceNumber": "1",
                "start": {
                    "accountSid": ACCOUNT_SID,
                    "streamSid": self.stream_sid,
                    "callSid": self.call_sid,
                    "tracks": ["inbound"],
                    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
                    "customParameters": parameters,
                },
                "streamSid": self.stream_sid,
            }
        )
        self._tasks = [asyncio.create_task(self._talk()), asyncio.create_task(self._listen())]

    async def send(self, message: dict) -> None:
        assert self.websocket is not None
        await self.websocket.send(json.dumps(message))

    async def _talk(self) -> None:
        """A media frame every 20 ms, as Twilio sends: silence, or a tone while speaking."""
        sequence, chunk = 2, 1
        next_at = time.monotonic()
        try:
            while True:
                payload = TONE if time.monotonic() < self._speaking_until else SILENCE
                await self.send(
                    {
                        "event": "media",
                        "sequenceNumber": str(sequence),
                        "media": {
                            "track": "inbound",
                            "chunk": str(chunk),
                            "timestamp": str(chunk * FRAME_MS),
                            "payload": base64.b64encode(payload).decode(),
                        },
                        "streamSid": self.stream_sid,
                    }
                )
                sequence, chunk = sequence + 1, chunk + 1
                next_at += FRAME_MS / 1000
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        except ConnectionClosed:
            self.closed_by_bot.set()

    async def _listen(self) -> None:
        assert self.websocket is not None
        try:
            async for raw in self.websocket:
                message = json.loads(raw)
                if message.get("event") == "media":
                    audio = base64.b64decode(message["media"]["payload"])
                    self.heard.append((time.monotonic(), len(audio)))
                else:
                    self.events.append(message)
        except ConnectionClosed:
            pass
        self.closed_by_bot.set()

    def heard_seconds(self, since: float = 0.0) -> float:
        """Seconds of the bot's audio received after the monotonic time since."""
        return sum(size for at, size in self.heard if at >= since) / 8000

    async def say(self, seconds: float = 0.3) -> float:
        """Speak (a tone) for seconds; when the speech ended."""
        self._speaking_until = time.monotonic() + seconds
        await asyncio.sleep(seconds)
        return time.monotonic()

    async def hear(self, since: float, timeout: float = 10.0, quiet: float = 0.4) -> float:
        """Wait until the bot spoke after since and then was quiet for quiet seconds; the
        seconds of audio heard."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            spoken = [at for at, _ in self.heard if at >= since]
            if spoken and time.monotonic() - spoken[-1] >= quiet:
                return self.heard_seconds(since)
            await asyncio.sleep(0.02)
        raise AssertionError(f"the bot said nothing after {since:.2f} within {timeout} s")

    async def hang_up(self) -> None:
        """The caller hangs up: Twilio sends stop and closes the stream."""
        try:
            await self.send(
                {
                    "event": "stop",
                    "sequenceNumber": "999999",
                    "stop": {"accountSid": ACCOUNT_SID, "callSid": self.call_sid},
                    "streamSid": self.stream_sid,
                }
            )
        except ConnectionClosed:
            pass
        await self.close()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.websocket is not None:
            await self.websocket.close()
