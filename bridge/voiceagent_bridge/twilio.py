"""Twilio Media Streams for a voice runtime of the service: what any bot on Twilio needs.

Twilio's request signatures, and the TwiML that connects a call's audio to the bot's
websocket with parameters the bot signs itself (`stream_token`), so that only a stream opened
from the bot's own answer starts a call. A `TwilioLine` is a bot's side of its calls: it
accepts a media stream (checks it, then starts its call with the service, or takes up the
outbound call it dialled), gives Pipecat the stream's transport, and dials the outbound calls
it claims from the service's dispatch (those from phone numbers: channel `phone`).
"""

import asyncio
import base64
import hashlib
import hmac
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from xml.sax.saxutils import quoteattr

import aiohttp
from fastapi import WebSocket
from pipecat.runner.utils import parse_telephony_websocket
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams, FastAPIWebsocketTransport

from voiceagent_bridge.bridge import ServiceFeatures
from voiceagent_bridge.client import (
    Call,
    CallRejected,
    DispatchedCall,
    RuntimeAPIError,
    RuntimeClient,
    Session,
)

log = logging.getLogger(__name__)

TWILIO_RATE = 8000  # Media Streams carry 8 kHz mu-law both ways
# Where Twilio reaches the bot, under its public address.
VOICE_PATH = "/twilio/voice"  # the number's "A call comes in" webhook
STATUS_PATH = "/twilio/status"  # the status callback of an outbound call
STREAM_PATH = "/twilio/stream"  # the media stream's websocket
# An outbound call's status when it never connected its audio, as its hangupReason.
UNANSWERED = {"busy": "busy", "no-answer": "no_answer", "failed": "failed", "canceled": "canceled"}


# -- Twilio's signatures, and the bot's own -----------------------------------------------------


def twilio_signature(auth_token: str, url: str, params: Mapping[str, str]) -> str:
    """X-Twilio-Signature of a request: HMAC-SHA1 of the URL and the sorted POST parameters."""
    payload = url + "".join(name + params[name] for name in sorted(params))
    digest = hmac.new(auth_token.encode(), payload.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def stream_token(auth_token: str, *values: str) -> str:
    """The bot's own signature of a media stream's parameters: only a stream that Twilio
    opened from the bot's TwiML carries a valid one."""
    message = "\x1f".join(("stream", *values)).encode()
    return hmac.new(auth_token.encode(), message, hashlib.sha256).hexdigest()


def stream_twiml(url: str, parameters: Mapping[str, str]) -> str:
    """TwiML that connects the call's audio to the bot's websocket, with parameters."""
    params = "".join(
        f"<Parameter name={quoteattr(name)} value={quoteattr(value)}/>"
        for name, value in parameters.items()
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Response><Connect><Stream url={quoteattr(url)}>{params}</Stream></Connect></Response>"
    )


def stream_url(public_url: str) -> str:
    """The media stream's websocket: wss:// for an https public URL (ws:// for http)."""
    scheme, _, rest = public_url.rstrip("/").partition("://")
    return ("wss" if scheme == "https" else "ws") + "://" + rest + STREAM_PATH


def inbound_twiml(auth_token: str, public_url: str, form: Mapping[str, str]) -> str:
    """The answer to the voice webhook of an incoming call (its form, as Twilio posted it):
    the call's audio to the bot's stream, with the caller and the number, signed."""
    caller, did, call_sid = form.get("From", ""), form.get("To", ""), form.get("CallSid", "")
    token = stream_token(auth_token, "inbound", call_sid, caller, did)
    parameters = {"from_number": caller, "to_number": did, "token": token}
    return stream_twiml(stream_url(public_url), parameters)


# -- the calls ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TwilioAccount:
    """The Twilio account of the bot's numbers: its auth token checks Twilio's requests and
    signs the bot's streams, and the REST API hangs calls up and dials them."""

    sid: str
    auth_token: str
    api_url: str = "https://api.twilio.com"


@dataclass(frozen=True)
class MediaStream:
    """A media stream Twilio opened from the bot's TwiML, and the call it carries."""

    stream_sid: str
    call_sid: str
    call: Call
    session: Session
    started: float  # time.monotonic() when the call reached the bot (outbound: was dialled)


@dataclass
class TwilioLine:
    """A bot's calls through Twilio: its client of the service (and what it learned of the
    service), the calls in progress, and the outbound calls being dialled."""

    client: RuntimeClient
    account: TwilioAccount
    public_url: str  # https://… where Twilio reaches the bot
    max_calls: int = 20  # calls at once the bot takes from dispatch
    features: ServiceFeatures = field(default_factory=ServiceFeatures)
    dialing: dict[str, tuple[DispatchedCall, float]] = field(default_factory=dict)
    active: set[str] = field(default_factory=set)

    async def accept(self, websocket: WebSocket) -> MediaStream | None:
        """A media stream from Twilio: check it, and start (or take up) its call. None, with
        the stream closed, when it is refused or the service turns the call away."""
        started = time.monotonic()
        _, call_data = await parse_telephony_websocket(websocket)
        stream_sid, call_sid = call_data.get("stream_id"), call_data.get("call_id")
        params: dict[str, str] = dict(call_data.get("body") or {})
        caller, did = params.get("from_number", ""), params.get("to_number", "")
        call_id = params.get("call_id", "")
        signed = ("outbound", call_id) if call_id else ("inbound", call_sid or "", caller, did)
        expected = stream_token(self.account.auth_token, *signed)
        if (
            not stream_sid
            or not call_sid
            or not hmac.compare_digest(params.get("token", ""), expected)
        ):
            log.warning("refused a media stream without a valid token")
            await websocket.close(code=4003)
            return None
        if call_id:
            claimed = self.dialing.pop(call_id, None)
            if claimed is None:
                log.warning("call %s: no outbound call of that id is being dialled", call_id)
                await websocket.close(code=4004)
                return None
            (dispatched, started) = claimed
            call, session = dispatched.call, dispatched.session
        else:
            try:
                begun = await self.client.start_call(
                    did=did, caller_number=caller, provider_call_id=call_sid
                )
            except CallRejected as exc:
                log.info("call %s to %s turned away: %s", call_sid, did, exc.code)
                await websocket.close()
                return None
            except RuntimeAPIError as exc:
                log.error("call %s to %s could not start: %s", call_sid, did, exc)
                await websocket.close()
                return None
            call, session = begun.call, begun.session
        return MediaStream(stream_sid, call_sid, call, session, started)

    def transport(self, websocket: WebSocket, stream: MediaStream) -> FastAPIWebsocketTransport:
        """Pipecat's transport of a media stream, through Twilio's serializer (which hangs the
        call up through Twilio's REST API when the pipeline ends it)."""
        serializer = TwilioFrameSerializer(
            stream_sid=stream.stream_sid,
            call_sid=stream.call_sid,
            account_sid=self.account.sid,
            auth_token=self.account.auth_token,
            base_url=self.account.api_url,
        )
        return FastAPIWebsocketTransport(
            websocket=websocket,
            params=FastAPIWebsocketParams(
                audio_in_enabled=True,
                audio_out_enabled=True,
                add_wav_header=False,
                serializer=serializer,
            ),
        )

    # -- outbound -------------------------------------------------------------------------------

    async def dispatch_forever(self, interval_s: float = 1.0) -> None:
        """Claim queued outbound calls while there is room, and dial each."""
        while True:
            room = self.max_calls - len(self.active) - len(self.dialing)
            if room > 0:
                try:
                    claimed = await self.client.dispatch(max_calls=min(room, 50), channel="phone")
                except RuntimeAPIError as exc:
                    log.warning("dispatch: %s", exc)
                    claimed = []
                for dispatched in claimed:
                    await self.dial(dispatched)
            await asyncio.sleep(interval_s)

    async def dial(self, dispatched: DispatchedCall) -> None:
        """Place a claimed call through Twilio's REST API; its audio comes to the stream."""
        call = dispatched.call
        self.dialing[call.id] = (dispatched, time.monotonic())
        # The business number (the call's caller) dials the callee; the stream's parameters
        # name the call, signed.
        token = stream_token(self.account.auth_token, "outbound", call.id)
        twiml = stream_twiml(stream_url(self.public_url), {"call_id": call.id, "token": token})
        url = f"{self.account.api_url}/2010-04-01/Accounts/{self.account.sid}/Calls.json"
        form = {
            "To": call.callee_number,
            "From": call.caller_number,
            "Twiml": twiml,
            "StatusCallback": f"{self.public_url}{STATUS_PATH}?call_id={call.id}",
        }
        auth = aiohttp.encode_basic_auth(self.account.sid, self.account.auth_token)
        try:
            async with aiohttp.ClientSession() as http:
                async with http.post(
                    url,
                    data=form,
                    headers={"Authorization": auth},
                    timeout=aiohttp.ClientTimeout(total=10),
                ) as response:
                    if response.status >= 300:
                        raise RuntimeError(f"Twilio answered HTTP {response.status}")
        except Exception as exc:
            log.error("call %s could not be dialled: %s", call.id, exc)
            await self.unanswered(call.id, "dial_failed")

    async def unanswered(self, call_id: str, reason: str) -> None:
        """An outbound call that never connected its audio: report it failed."""
        claimed = self.dialing.pop(call_id, None)
        if claimed is None:
            return
        duration = round(time.monotonic() - claimed[1])
        try:
            await self.client.end_call(
                call_id,
                status="failed",
                duration_seconds=duration,
                talk_time_seconds=0,
                hangup_reason=reason,
                hangup_initiator="callee",
            )
        except RuntimeAPIError as exc:
            log.error("call %s: could not report it %s: %s", call_id, reason, exc)
