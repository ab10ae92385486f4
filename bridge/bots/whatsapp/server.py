"""The WhatsApp bot's web server: Meta's webhook for calls to the tenants' WhatsApp numbers.

    python server.py --host 0.0.0.0 --port 8767   # Meta posts to https://…/whatsapp/webhook

GET /whatsapp/webhook answers Meta's subscription check (WHATSAPP_VERIFY_TOKEN); POST
/whatsapp/webhook takes Meta's events: each is checked against the app secret of the number it
names (from the service's runtime API) and answered 200 at once, 401 when its signature is
wrong. GET /healthz says whether the bot takes calls (503 once stopping) and how many it
holds. A user's call is started with the service and answered over WebRTC, then run by `bot`
(bot.py) with Gemini Live; with BOT_DISPATCH=1 the bot also places the service's queued
outbound calls from WhatsApp numbers (dispatch's channel whatsapp: those from phone numbers
stay queued for a telephony bot), each from the WhatsApp number dispatch names. With
BOT_REDIS_URL several bot processes share the one webhook URL: each call's later events reach
the process holding it.
On SIGTERM the bot takes no new call and stops once its calls have ended. Settings come from
the environment, or from a .env file beside this one (env.example lists them).
"""

import argparse
import asyncio
import importlib.util
import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pipecat.transports.smallwebrtc.connection import IceServer

from bot import ServicesFactory, run_call
from voiceagent_bridge.bridge import BridgeOptions, Prices
from voiceagent_bridge.client import RuntimeAPIError, RuntimeClient
from voiceagent_bridge.services import load_factory
from voiceagent_bridge.webrtc import gather_candidates_on
from voiceagent_bridge.whatsapp import (
    WEBHOOK_PATH,
    Handoff,
    WhatsAppLine,
    verify_subscription,
)


@dataclass(frozen=True)
class BotSettings:
    """What the bot needs, from the environment (`from_env`)."""

    service_url: str  # SERVICE_URL: the Voice Agent API, e.g. http://127.0.0.1:5000
    runtime_token: str  # RUNTIME_TOKEN: the service's runtime token
    verify_token: str  # WHATSAPP_VERIFY_TOKEN: what Meta's subscription check must bring
    services: str = "bot:gemini_live_services"  # BOT_SERVICES
    max_call_seconds: float | None = None  # BOT_MAX_CALL_SECONDS
    goodbye_text: str | None = None  # BOT_GOODBYE_TEXT
    prices: Prices | None = None  # BOT_PRICES, JSON of Prices' fields (IDR)
    report_give_up_s: float = 900.0  # BOT_REPORT_GIVE_UP_SECONDS
    dispatch: bool = False  # BOT_DISPATCH=1: place the service's queued outbound calls
    max_calls: int = 20  # BOT_MAX_CALLS: calls at once this bot takes from dispatch
    no_answer_s: float = 60.0  # BOT_NO_ANSWER_SECONDS
    redis_url: str = ""  # BOT_REDIS_URL: share the webhook with other bot processes
    ice_servers: tuple[str, ...] = field(default=())  # BOT_ICE_SERVERS: stun:… urls
    media_addresses: tuple[str, ...] = ()  # BOT_MEDIA_ADDRESSES: host candidates only here

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "BotSettings":
        env = dict(os.environ if env is None else env)
        required = ("SERVICE_URL", "RUNTIME_TOKEN", "WHATSAPP_VERIFY_TOKEN")
        missing = [name for name in required if not env.get(name)]
        if missing:
            raise SystemExit(f"Set {', '.join(missing)} (see the bridge's documentation).")
        prices = env.get("BOT_PRICES")

        def listed(name: str) -> tuple[str, ...]:
            return tuple(part.strip() for part in (env.get(name) or "").split(",") if part.strip())

        return cls(
            service_url=env["SERVICE_URL"],
            runtime_token=env["RUNTIME_TOKEN"],
            verify_token=env["WHATSAPP_VERIFY_TOKEN"],
            services=env.get("BOT_SERVICES") or cls.services,
            max_call_seconds=float(env["BOT_MAX_CALL_SECONDS"])
            if env.get("BOT_MAX_CALL_SECONDS")
            else None,
            goodbye_text=env.get("BOT_GOODBYE_TEXT") or None,
            prices=Prices(**json.loads(prices)) if prices else None,
            report_give_up_s=float(env.get("BOT_REPORT_GIVE_UP_SECONDS") or 900.0),
            dispatch=env.get("BOT_DISPATCH") == "1",
            max_calls=int(env.get("BOT_MAX_CALLS") or 20),
            no_answer_s=float(env.get("BOT_NO_ANSWER_SECONDS") or 60.0),
            redis_url=env.get("BOT_REDIS_URL") or "",
            ice_servers=listed("BOT_ICE_SERVERS"),
            media_addresses=listed("BOT_MEDIA_ADDRESSES"),
        )

    def options(self) -> BridgeOptions:
        return BridgeOptions(
            max_call_seconds=self.max_call_seconds,
            goodbye_text=self.goodbye_text,
            prices=self.prices,
            report_give_up_s=self.report_give_up_s,
        )


def create_app(settings: BotSettings, factory: ServicesFactory | None = None) -> FastAPI:
    """The bot's web app: Meta's webhook."""
    services = factory or load_factory(settings.services)
    line: WhatsAppLine | None = None

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        nonlocal line
        async with RuntimeClient(settings.service_url, settings.runtime_token) as client:
            line = WhatsAppLine(
                client,
                services,
                options=settings.options(),
                verify_token=settings.verify_token,
                ice_servers=[IceServer(urls=url) for url in settings.ice_servers],
                no_answer_s=settings.no_answer_s,
                handoff=Handoff(settings.redis_url) if settings.redis_url else None,
                max_calls=settings.max_calls,
                run_call=run_call,
            )
            await line.start()
            dialer = None
            if settings.dispatch:
                dialer = asyncio.create_task(line.dispatch_forever(), name="dispatch")
            yield
            if dialer is not None:
                dialer.cancel()
            # Asked to stop: no new call; the calls held end as they end.
            await line.drain()
            await line.close()

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/healthz")
    async def health() -> Response:
        """For a load balancer: 200 while the bot takes calls, 503 once it is stopping; and
        how many calls it holds."""
        assert line is not None
        body = {"taking": line.taking, "calls": line.active, "tasks": len(line.tasks)}
        return JSONResponse(body, status_code=200 if line.taking else 503)

    @app.get(WEBHOOK_PATH)
    async def verify(request: Request) -> Response:
        """Meta's subscription check: echo its challenge when its token is ours."""
        challenge = verify_subscription(dict(request.query_params), settings.verify_token)
        if challenge is None:
            return Response(status_code=403)
        return PlainTextResponse(challenge)

    @app.post(WEBHOOK_PATH)
    async def webhook(request: Request) -> Response:
        """Meta's events: 200 at once (the work goes on after), 401 for a bad signature."""
        assert line is not None
        body = await request.body()
        try:
            status = await line.receive(body, request.headers.get("X-Hub-Signature-256"))
        except RuntimeAPIError as exc:  # the numbers cannot be checked: Meta repeats
            logging.getLogger("bots.whatsapp").error("webhook not checked: %s", exc)
            return Response(status_code=503)
        return Response(status_code=status)

    return app


def main() -> None:
    import uvicorn
    from dotenv import load_dotenv
    from loguru import logger

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8767)
    args = parser.parse_args()
    # The environment wins over the file.
    load_dotenv(Path(__file__).with_name(".env"))
    level = (os.environ.get("LOG_LEVEL") or "INFO").upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # Pipecat logs through loguru, at DEBUG unless told otherwise.
    logger.remove()
    logger.add(sys.stderr, level=level)
    settings = BotSettings.from_env()
    if settings.redis_url and importlib.util.find_spec("redis") is None:
        raise SystemExit("BOT_REDIS_URL needs redis-py: pip install './bridge[handoff]'")
    if settings.media_addresses:
        gather_candidates_on(settings.media_addresses)
    # Uvicorn's own stop waits for open requests; the calls are waited for in the lifespan.
    uvicorn.run(create_app(settings), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
