"""An example voice runtime: phone calls through Twilio Media Streams, answered by the
service's agents in a Pipecat pipeline.

    python -m voiceagent_bridge.twilio_bot --port 8765

Twilio posts each incoming call to /twilio/voice (signed with the account's auth token); the
answer connects the call's audio to the websocket /twilio/stream, where the call is reported
to the service (POST /internal/v1/calls) and its agent runs through a `CallBridge`. With
BOT_DISPATCH=1 the bot also claims queued outbound calls (POST /internal/v1/dispatch) and
dials them through Twilio's REST API. Settings come from the environment (`BotSettings`).
The speech and language services are chosen by a factory, `module:function` in BOT_SERVICES
(default: `openai_services`, OpenAI for all three; Pipecat has many others).
"""

import argparse
import asyncio
import base64
import contextlib
import hashlib
import hmac
import importlib
import json
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import quoteattr

import aiohttp
from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import Response
from pipecat.pipeline.worker import PipelineParams
from pipecat.runner.utils import parse_telephony_websocket
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams, FastAPIWebsocketTransport
from pipecat.workers.runner import WorkerRunner

from voiceagent_bridge.bridge import (
    BridgeOptions,
    CallBridge,
    Prices,
    ServiceFeatures,
    VoiceServices,
)
from voiceagent_bridge.client import (
    Call,
    CallRejected,
    DispatchedCall,
    RuntimeAPIError,
    RuntimeClient,
    Session,
)

log = logging.getLogger("voiceagent_bridge.twilio_bot")

TWILIO_RATE = 8000  # Media Streams carry 8 kHz mu-law both ways
ServicesFactory = Callable[[Call, Session], VoiceServices]


@dataclass(frozen=True)
class BotSettings:
    """What the bot needs, from the environment (`from_env`)."""

    service_url: str  # SERVICE_URL: the Voice Agent API, e.g. http://127.0.0.1:5000
    runtime_token: str  # RUNTIME_TOKEN: the service's runtime token
    public_url: str  # PUBLIC_URL: https://… where Twilio reaches this bot
    twilio_account_sid: str  # TWILIO_ACCOUNT_SID
    twilio_auth_token: str  # TWILIO_AUTH_TOKEN: checks Twilio's requests, and hangs up
    twilio_api_url: str = "https://api.twilio.com"  # TWILIO_API_URL
    services: str = "voiceagent_bridge.twilio_bot:openai_services"  # BOT_SERVICES
    max_call_seconds: float | None = None  # BOT_MAX_CALL_SECONDS
    goodbye_text: str | None = None  # BOT_GOODBYE_TEXT
    prices: Prices | None = None  # BOT_PRICES, JSON of Prices' fields (IDR)
    dispatch: bool = False  # BOT_DISPATCH=1: dial the service's queued outbound calls
    max_calls: int = 20  # BOT_MAX_CALLS: calls at once this bot takes from dispatch
    report_give_up_s: float = 900.0  # BOT_REPORT_GIVE_UP_SECONDS

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "BotSettings":
        env = dict(os.environ if env is None else env)
        missing = [
            name
            for name in (
                "SERVICE_URL",
                "RUNTIME_TOKEN",
                "PUBLIC_URL",
                "TWILIO_ACCOUNT_SID",
                "TWILIO_AUTH_TOKEN",
            )
            if not env.get(name)
        ]
        if missing:
            raise SystemExit(f"Set {', '.join(missing)} (see the bridge's documentation).")
        prices = env.get("BOT_PRICES")
        return cls(
            service_url=env["SERVICE_URL"],
            runtime_token=env["RUNTIME_TOKEN"],
            public_url=env["PUBLIC_URL"].rstrip("/"),
            twilio_account_sid=env["TWILIO_ACCOUNT_SID"],
            twilio_auth_token=env["TWILIO_AUTH_TOKEN"],
            twilio_api_url=env.get("TWILIO_API_URL") or cls.twilio_api_url,
            services=env.get("BOT_SERVICES") or cls.services,
            max_call_seconds=float(env["BOT_MAX_CALL_SECONDS"])
            if env.get("BOT_MAX_CALL_SECONDS")
            else None,
            goodbye_text=env.get("BOT_GOODBYE_TEXT") or None,
            prices=Prices(**json.loads(prices)) if prices else None,
            dispatch=env.get("BOT_DISPATCH") == "1",
            max_calls=int(env.get("BOT_MAX_CALLS") or cls.max_calls),
            report_give_up_s=float(env.get("BOT_REPORT_GIVE_UP_SECONDS") or 900.0),
        )

    @property
    def stream_url(self) -> str:
        """The media stream's websocket: wss:// for an https PUBLIC_URL (ws:// for http)."""
        scheme, _, rest = self.public_url.partition("://")
        return ("wss" if scheme == "https" else "ws") + "://" + rest + "/twilio/stream"

    def options(self) -> BridgeOptions:
        return BridgeOptions(
            max_call_seconds=self.max_call_seconds,
            goodbye_text=self.goodbye_text,
            prices=self.prices,
            report_give_up_s=self.report_give_up_s,
        )


def load_factory(path: str) -> ServicesFactory:
    """The services factory named module:function."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


# -- Twilio's signatures ------------------------------------------------------------------------


def twilio_signature(auth_token: str, url: str, params: dict[str, str]) -> str:
    """X-Twilio-Signature of a request: HMAC-SHA1 of the URL and the sorted POST parameters."""
    payload = url + "".join(name + params[name] for name in sorted(params))
    digest = hmac.new(auth_token.encode(), payload.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def stream_token(auth_token: str, *values: str) -> str:
    """The bot's own signature of a media stream's parameters: only a stream that Twilio
    opened from the bot's TwiML carries a valid one."""
    message = "\x1f".join(("stream", *values)).encode()
    return hmac.new(auth_token.encode(), message, hashlib.sha256).hexdigest()


def stream_twiml(url: str, parameters: dict[str, str]) -> str:
    """TwiML that connects the call's audio to the bot's websocket, with parameters."""
    params = "".join(
        f"<Parameter name={quoteattr(name)} value={quoteattr(value)}/>"
        for name, value in parameters.items()
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Response><Connect><Stream url={quoteattr(url)}>{params}</Stream></Connect></Response>"
    )


# -- the calls ----------------------------------------------------------------------------------


@dataclass
class Bot:
    """The running bot: its client of the service, and the outbound calls being dialled."""

    settings: BotSettings
    factory: ServicesFactory
    client: RuntimeClient
    features: ServiceFeatures = field(default_factory=ServiceFeatures)
    dialing: dict[str, tuple[DispatchedCall, float]] = field(default_factory=dict)
    active: set[str] = field(default_factory=set)

    async def run_call(
        self,
        websocket: WebSocket,
        *,
        stream_sid: str,
        call_sid: str,
        call: Call,
        session: Session,
        started: float,
    ) -> None:
        """One call, from its media stream to its last report."""
        bridge = CallBridge(
            self.client,
            call,
            session,
            options=self.settings.options(),
            features=self.features,
            started=started,
        )
        self.active.add(call.id)
        try:
            await self._converse(websocket, bridge, stream_sid=stream_sid, call_sid=call_sid)
        except Exception:
            log.exception("call %s failed in the runtime", call.id)
            bridge.end_now("runtime_error", initiator="system")
            with contextlib.suppress(Exception):  # the stream may be gone already
                await websocket.close()  # Twilio ends the call with it
        finally:
            self.active.discard(call.id)
        if not await bridge.finish():
            log.error("call %s: some of its reports never reached the service", call.id)

    async def _converse(
        self, websocket: WebSocket, bridge: CallBridge, *, stream_sid: str, call_sid: str
    ) -> None:
        """The conversation: Pipecat's pipeline on the call's media stream, until it ends."""
        serializer = TwilioFrameSerializer(
            stream_sid=stream_sid,
            call_sid=call_sid,
            account_sid=self.settings.twilio_account_sid,
            auth_token=self.settings.twilio_auth_token,
            base_url=self.settings.twilio_api_url,
        )
        transport = FastAPIWebsocketTransport(
            websocket=websocket,
            params=FastAPIWebsocketParams(
                audio_in_enabled=True,
                audio_out_enabled=True,
                add_wav_header=False,
                serializer=serializer,
            ),
        )
        worker = bridge.build_worker(
            transport,
            self.factory(bridge.call, bridge.session),
            params=PipelineParams(
                audio_in_sample_rate=TWILIO_RATE,
                audio_out_sample_rate=TWILIO_RATE,
                enable_metrics=True,
                enable_usage_metrics=True,
            ),
        )

        @transport.event_handler("on_client_connected")
        async def on_connected(_transport: Any, _client: Any) -> None:
            await bridge.answered()

        @transport.event_handler("on_client_disconnected")
        async def on_disconnected(_transport: Any, _client: Any) -> None:
            await bridge.caller_hung_up()
            await worker.cancel(reason="the caller hung up")

        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        await runner.run()

    async def open_stream(self, websocket: WebSocket) -> None:
        """A media stream from Twilio: check it, start (or take up) its call, and run it."""
        started = time.monotonic()
        _, call_data = await parse_telephony_websocket(websocket)
        stream_sid, call_sid = call_data.get("stream_id"), call_data.get("call_id")
        params: dict[str, str] = dict(call_data.get("body") or {})
        caller, did = params.get("from_number", ""), params.get("to_number", "")
        call_id = params.get("call_id", "")
        signed = ("outbound", call_id) if call_id else ("inbound", call_sid or "", caller, did)
        expected = stream_token(self.settings.twilio_auth_token, *signed)
        if (
            not stream_sid
            or not call_sid
            or not hmac.compare_digest(params.get("token", ""), expected)
        ):
            log.warning("refused a media stream without a valid token")
            await websocket.close(code=4003)
            return
        if call_id:
            claimed = self.dialing.pop(call_id, None)
            if claimed is None:
                log.warning("call %s: no outbound call of that id is being dialled", call_id)
                await websocket.close(code=4004)
                return
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
                return
            except RuntimeAPIError as exc:
                log.error("call %s to %s could not start: %s", call_sid, did, exc)
                await websocket.close()
                return
            call, session = begun.call, begun.session
        await self.run_call(
            websocket,
            stream_sid=stream_sid,
            call_sid=call_sid,
            call=call,
            session=session,
            started=started,
        )

    # -- outbound -------------------------------------------------------------------------------

    async def dispatch_forever(self, interval_s: float = 1.0) -> None:
        """Claim queued outbound calls while there is room, and dial each."""
        while True:
            room = self.settings.max_calls - len(self.active) - len(self.dialing)
            if room > 0:
                try:
                    claimed = await self.client.dispatch(max_calls=min(room, 50))
                except RuntimeAPIError as exc:
                    log.warning("dispatch: %s", exc)
                    claimed = []
                for dispatched in claimed:
                    await self.dial(dispatched)
            await asyncio.sleep(interval_s)

    async def dial(self, dispatched: DispatchedCall) -> None:
        """Place a claimed call through Twilio's REST API; its audio comes to /twilio/stream."""
        call = dispatched.call
        self.dialing[call.id] = (dispatched, time.monotonic())
        # The business number (the call's caller) dials the callee; the stream's parameters
        # name the call, signed.
        token = stream_token(self.settings.twilio_auth_token, "outbound", call.id)
        twiml = stream_twiml(self.settings.stream_url, {"call_id": call.id, "token": token})
        url = (
            f"{self.settings.twilio_api_url}/2010-04-01/Accounts/"
            f"{self.settings.twilio_account_sid}/Calls.json"
        )
        form = {
            "To": call.callee_number,
            "From": call.caller_number,
            "Twiml": twiml,
            "StatusCallback": f"{self.settings.public_url}/twilio/status?call_id={call.id}",
        }
        auth = aiohttp.encode_basic_auth(
            self.settings.twilio_account_sid, self.settings.twilio_auth_token
        )
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


UNANSWERED = {"busy": "busy", "no-answer": "no_answer", "failed": "failed", "canceled": "canceled"}


def create_app(settings: BotSettings, factory: ServicesFactory | None = None) -> FastAPI:
    """The bot's web app: Twilio's webhooks and the media stream websocket."""
    services = factory or load_factory(settings.services)
    bot: Bot | None = None

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        nonlocal bot
        async with RuntimeClient(settings.service_url, settings.runtime_token) as client:
            bot = Bot(settings, services, client)
            dialer = asyncio.create_task(bot.dispatch_forever()) if settings.dispatch else None
            yield
            if dialer is not None:
                dialer.cancel()

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    async def twilio_form(request: Request) -> dict[str, str] | None:
        """The form Twilio posted, or None when its signature does not hold."""
        body = (await request.body()).decode()
        form = dict(parse_qsl(body, keep_blank_values=True))
        url = settings.public_url + request.url.path
        if request.url.query:
            url += "?" + request.url.query
        expected = twilio_signature(settings.twilio_auth_token, url, form)
        given = request.headers.get("X-Twilio-Signature", "")
        return form if hmac.compare_digest(given, expected) else None

    @app.post("/twilio/voice")
    async def incoming_call(request: Request) -> Response:
        """Twilio's webhook for a call to one of the numbers: connect it to the stream."""
        form = await twilio_form(request)
        if form is None:
            return Response(status_code=403)
        caller, did, call_sid = form.get("From", ""), form.get("To", ""), form.get("CallSid", "")
        token = stream_token(settings.twilio_auth_token, "inbound", call_sid, caller, did)
        twiml = stream_twiml(
            settings.stream_url, {"from_number": caller, "to_number": did, "token": token}
        )
        return Response(content=twiml, media_type="application/xml")

    @app.post("/twilio/status")
    async def call_status(request: Request) -> Response:
        """Twilio's status callback of an outbound call: report it when it went unanswered."""
        form = await twilio_form(request)
        if form is None:
            return Response(status_code=403)
        reason = UNANSWERED.get(form.get("CallStatus", ""))
        call_id = request.query_params.get("call_id", "")
        if reason and bot is not None:
            await bot.unanswered(call_id, reason)
        return Response(status_code=204)

    @app.websocket("/twilio/stream")
    async def media_stream(websocket: WebSocket) -> None:
        await websocket.accept()
        assert bot is not None
        await bot.open_stream(websocket)

    return app


# -- the default services -----------------------------------------------------------------------

# The agent's voiceId (the service's five voices) as one of OpenAI's voices.
OPENAI_VOICES = {
    "Puck": "ash",
    "Charon": "onyx",
    "Kore": "coral",
    "Fenrir": "echo",
    "Aoede": "sage",
}


def openai_services(call: Call, session: Session) -> VoiceServices:
    """OpenAI for speech in, language and speech out (OPENAI_API_KEY), Silero for when the
    caller speaks, and Pipecat's local turn model for when they are done."""
    from pipecat.audio.vad.silero import SileroVADAnalyzer
    from pipecat.processors.aggregators.llm_response_universal import LLMUserAggregatorParams
    from pipecat.services.openai.llm import OpenAILLMService
    from pipecat.services.openai.stt import OpenAISTTService
    from pipecat.services.openai.tts import OpenAITTSService
    from pipecat.transcriptions.language import Language

    key = os.environ["OPENAI_API_KEY"]
    return VoiceServices(
        stt=OpenAISTTService(
            api_key=key, settings=OpenAISTTService.Settings(language=Language(session.language))
        ),
        llm=OpenAILLMService(
            api_key=key,
            settings=OpenAILLMService.Settings(system_instruction=session.system_prompt),
        ),
        tts=OpenAITTSService(
            api_key=key,
            settings=OpenAITTSService.Settings(voice=OPENAI_VOICES.get(session.voice_id, "alloy")),
        ),
        user_params=LLMUserAggregatorParams(vad_analyzer=SileroVADAnalyzer()),
    )


def main() -> None:
    import uvicorn
    from loguru import logger

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    level = os.environ.get("LOG_LEVEL", "INFO").upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # Pipecat logs through loguru, at DEBUG unless told otherwise.
    logger.remove()
    logger.add(sys.stderr, level=level)
    uvicorn.run(create_app(BotSettings.from_env()), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
