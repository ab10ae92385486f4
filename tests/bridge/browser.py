"""A browser on the page of the WebRTC bot, in aiortc: it posts its offer to the bot as the
page does, sends its microphone (silence, or a tone while it speaks) as Opus, hears the
agent's audio and reads the page's messages from the data channel.

Its media stays on 127.0.0.1: no STUN or TURN server, aioice's host addresses are 127.0.0.1
alone (`loopback_only`, for the test's process), and it starts ICE only once the bot's answer
offered nothing but 127.0.0.1 either.
"""

import array
import asyncio
import fractions
import json
import math
import re
import time
from contextlib import contextmanager

import aiohttp
import aioice.ice
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame

RATE = 48_000  # Opus's own
FRAME_S = 0.02
FRAME_SAMPLES = int(RATE * FRAME_S)
LOUD = 1000  # RMS of 16-bit samples above which the agent is speaking
CANDIDATE = re.compile(r"^a=candidate:\S+ \d+ \S+ \d+ (\S+) \d+ typ (\S+)", re.M)


@contextmanager
def loopback_only():
    """While inside, this process's WebRTC gathers its host candidates on 127.0.0.1 alone."""
    original = aioice.ice.get_host_addresses
    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]
    try:
        yield
    finally:
        aioice.ice.get_host_addresses = original


def candidates(sdp: str) -> list[tuple[str, str]]:
    """The (address, type) of every candidate an SDP offers."""
    return CANDIDATE.findall(sdp)


def rms(samples: array.array) -> float:
    return math.sqrt(sum(s * s for s in samples) / len(samples)) if samples else 0.0


class Microphone(MediaStreamTrack):
    """20 ms frames in real time: a 300 Hz tone while speaking, else silence."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self.speaking_until = 0.0
        self._start: float | None = None
        self._pts = 0

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        else:
            self._pts += FRAME_SAMPLES
            await asyncio.sleep(max(0.0, self._start + self._pts / RATE - time.monotonic()))
        if time.monotonic() < self.speaking_until:
            tone = (
                12000 * math.sin(2 * math.pi * 300 * (self._pts + i) / RATE)
                for i in range(FRAME_SAMPLES)
            )
            pcm = array.array("h", (int(s) for s in tone)).tobytes()
        else:
            pcm = bytes(FRAME_SAMPLES * 2)
        frame = AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.planes[0].update(pcm)
        frame.pts = self._pts
        frame.sample_rate = RATE
        frame.time_base = fractions.Fraction(1, RATE)
        return frame


class Browser:
    """One call from the page of the bot at bot_url to the number did."""

    def __init__(self, bot_url: str, did: str, variables: dict | None = None) -> None:
        self.bot_url = bot_url
        self.did = did
        self.variables = variables
        self.microphone = Microphone()
        self.peer = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.channel = self.peer.createDataChannel("messages", ordered=True)
        self.messages: list[dict] = []  # what the bot sent the page
        self.heard: list[float] = []  # monotonic times of the agent's loud frames
        self.answer: dict = {}
        self._tasks: list[asyncio.Task] = []

        @self.channel.on("message")
        def on_message(message: str) -> None:
            self.messages.append(json.loads(message))

        @self.peer.on("track")
        def on_track(track: MediaStreamTrack) -> None:
            self._tasks.append(asyncio.create_task(self._listen(track)))

    async def call(self, origin: str | None = None) -> tuple[int, dict]:
        """Post the offer as the page does; the bot's status and answer (or error)."""
        self.peer.addTransceiver(self.microphone, direction="sendrecv")
        await self.peer.setLocalDescription(await self.peer.createOffer())
        offered = candidates(self.peer.localDescription.sdp)
        assert offered and set(offered) == {("127.0.0.1", "host")}, offered
        body = {
            "sdp": self.peer.localDescription.sdp,
            "type": self.peer.localDescription.type,
            "request_data": {"did": self.did, "variables": self.variables},
        }
        headers = {"Origin": origin or self.bot_url}
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"{self.bot_url}/api/offer", json=body, headers=headers
            ) as response:
                status, answer = response.status, await response.json()
        if status == 200:
            self.answer = answer
            # Checked before ICE starts: this peer then never sends to another address.
            assert set(candidates(answer["sdp"])) == {("127.0.0.1", "host")}, answer["sdp"]
            await self.peer.setRemoteDescription(
                RTCSessionDescription(sdp=answer["sdp"], type=answer["type"])
            )
        return status, answer

    async def connected(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.peer.connectionState != "connected":
            assert time.monotonic() < deadline, f"not connected: {self.peer.connectionState}"
            await asyncio.sleep(0.02)

    async def _listen(self, track: MediaStreamTrack) -> None:
        try:
            while True:
                frame = await track.recv()
                if rms(array.array("h", frame.to_ndarray().tobytes())) > LOUD:
                    self.heard.append(time.monotonic())
        except MediaStreamError:
            pass

    async def say(self, seconds: float = 0.3) -> float:
        """Speak (a tone) for seconds; when the speech ended."""
        self.microphone.speaking_until = time.monotonic() + seconds
        await asyncio.sleep(seconds)
        return time.monotonic()

    async def hear(self, since: float, timeout: float = 10.0, quiet: float = 0.4) -> None:
        """Wait until the agent spoke after since, then was quiet for quiet seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            spoken = [at for at in self.heard if at >= since]
            if spoken and time.monotonic() - spoken[-1] >= quiet:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"the agent said nothing after {since:.2f} within {timeout} s")

    def turns(self) -> list[str]:
        """The conversation as the page shows it."""
        return [f"{m['role']}: {m['text']}" for m in self.messages if m.get("type") == "turn"]

    async def hang_up(self) -> None:
        """The page's Hang up: the peer connection closes (and the microphone stops)."""
        await self.peer.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
