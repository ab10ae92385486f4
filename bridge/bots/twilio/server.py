"""The Twilio bot's web server: Twilio's webhooks, the media stream's websocket, the dialer.

    python server.py --port 8765

Twilio posts each incoming call to /twilio/voice (signed with the account's auth token); the
answer connects the call's audio to the websocket /twilio/stream, which runs `bot` (bot.py)
for the call. With BOT_DISPATCH=1 the server also claims the service's queued outbound calls
from phone numbers (POST /internal/v1/dispatch, channel phone: those from WhatsApp numbers
stay queued for the WhatsApp bot) and dials them through Twilio's REST API; Twilio reports one that
went unanswered to /twilio/status. Settings come from the environment, or from a .env file
beside this one (env.example lists them).

Pipecat's development runner (`pipecat.runner.run`) answers every call with the same unsigned
TwiML and dials nothing, so the bot has a server of its own, as the outbound bot of
pipecat-examples' twilio-chatbot does.
"""

import argparse
import asyncio
import hmac
import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import Response

from bot import ServicesFactory, TwilioBotArguments, bot
from voiceagent_bridge.bridge import BridgeOptions, Prices
from voiceagent_bridge.client import RuntimeClient
from voiceagent_bridge.services import load_factory
from voiceagent_bridge.twilio import (
    STATUS_PATH,
    STREAM_PATH,
    UNANSWERED,
    VOICE_PATH,
    TwilioAccount,
    TwilioLine,
    inbound_twiml,
    twilio_signature,
)


@dataclass(frozen=True)
class BotSettings:
    """What the bot needs, from the environment (`from_env`)."""

    service_url: str  # SERVICE_URL: the Voice Agent API, e.g. http://127.0.0.1:5000
    runtime_token: str  # RUNTIME_TOKEN: the service's runtime token
    public_url: str  # PUBLIC_URL: https://… where Twilio reaches this bot
    twilio_account_sid: str  # TWILIO_ACCOUNT_SID
    twilio_auth_token: str  # TWILIO_AUTH_TOKEN: checks Twilio's requests, and hangs up
    twilio_api_url: str = "https://api.twilio.com"  # TWILIO_API_URL
    services: str = "bot:openai_services"  # BOT_SERVICES
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

    def account(self) -> TwilioAccount:
        return TwilioAccount(self.twilio_account_sid, self.twilio_auth_token, self.twilio_api_url)

    def options(self) -> BridgeOptions:
        return BridgeOptions(
            max_call_seconds=self.max_call_seconds,
            goodbye_text=self.goodbye_text,
            prices=self.prices,
            report_give_up_s=self.report_give_up_s,
        )


def create_app(settings: BotSettings, factory: ServicesFactory | None = None) -> FastAPI:
    """The bot's web app: Twilio's webhooks and the media stream websocket."""
    services = factory or load_factory(settings.services)
    line: TwilioLine | None = None

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        nonlocal line
        async with RuntimeClient(settings.service_url, settings.runtime_token) as client:
            line = TwilioLine(
                client, settings.account(), settings.public_url, max_calls=settings.max_calls
            )
            dialer = asyncio.create_task(line.dispatch_forever()) if settings.dispatch else None
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

    @app.post(VOICE_PATH)
    async def incoming_call(request: Request) -> Response:
        """Twilio's webhook for a call to one of the numbers: connect it to the stream."""
        form = await twilio_form(request)
        if form is None:
            return Response(status_code=403)
        twiml = inbound_twiml(settings.twilio_auth_token, settings.public_url, form)
        return Response(content=twiml, media_type="application/xml")

    @app.post(STATUS_PATH)
    async def call_status(request: Request) -> Response:
        """Twilio's status callback of an outbound call: report it when it went unanswered."""
        form = await twilio_form(request)
        if form is None:
            return Response(status_code=403)
        reason = UNANSWERED.get(form.get("CallStatus", ""))
        call_id = request.query_params.get("call_id", "")
        if reason and line is not None:
            await line.unanswered(call_id, reason)
        return Response(status_code=204)

    @app.websocket(STREAM_PATH)
    async def media_stream(websocket: WebSocket) -> None:
        await websocket.accept()
        assert line is not None
        runner_args = TwilioBotArguments(
            websocket, line=line, services=services, options=settings.options()
        )
        await bot(runner_args)

    return app


def main() -> None:
    import uvicorn
    from dotenv import load_dotenv
    from loguru import logger

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    # The environment wins over the file.
    load_dotenv(Path(__file__).with_name(".env"))
    level = (os.environ.get("LOG_LEVEL") or "INFO").upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # Pipecat logs through loguru, at DEBUG unless told otherwise.
    logger.remove()
    logger.add(sys.stderr, level=level)
    uvicorn.run(create_app(BotSettings.from_env()), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
