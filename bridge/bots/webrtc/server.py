"""The browser bot's web server: the page that talks to an agent, and the offers of its calls.

    python server.py        # then open http://127.0.0.1:8766/

GET / is a page (index.html beside this file) that calls one of the tenant's numbers from the
browser over WebRTC: the microphone to the agent, the agent to the speakers, and the
conversation as text. It posts its offer to /api/offer, which answers it, starts the call with
the service (POST /internal/v1/calls) and runs `bot` (bot.py) on the connection. The server
listens on 127.0.0.1 unless told otherwise, and a call's media stays on the address it
listens on: no STUN or TURN server, and host candidates on that address only. Settings come
from the environment, or from a .env file beside this one (env.example lists them).

Pipecat's development runner (`pipecat.runner.run`) serves a prebuilt page of another package
over the same offer endpoint and starts a bot for any offer; this bot starts a call with the
service for each, to the number the page names, so its server and its page are its own.
"""

import argparse
import asyncio
import html
import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from bot import BrowserBotArguments, ServicesFactory, bot
from voiceagent_bridge.bridge import BridgeOptions, Prices
from voiceagent_bridge.client import CallRejected, RuntimeAPIError, RuntimeClient, ValidationFailed
from voiceagent_bridge.services import load_factory
from voiceagent_bridge.webrtc import (
    BROWSER_CALLER,
    OFFER_PATH,
    BrowserLine,
    gather_candidates_on,
    serving_addresses,
)

PAGE = Path(__file__).with_name("index.html")
STOP_WAIT_S = 10.0  # how long a stopping bot waits for its calls' last reports


@dataclass(frozen=True)
class BotSettings:
    """What the bot needs, from the environment (`from_env`)."""

    service_url: str  # SERVICE_URL: the Voice Agent API, e.g. http://127.0.0.1:5000
    runtime_token: str  # RUNTIME_TOKEN: the service's runtime token
    did: str = ""  # BOT_DID: the number the page calls unless it names another
    caller_number: str = BROWSER_CALLER  # BOT_CALLER_NUMBER: the caller's number of the calls
    services: str = "bot:openai_services"  # BOT_SERVICES
    max_call_seconds: float | None = None  # BOT_MAX_CALL_SECONDS
    goodbye_text: str | None = None  # BOT_GOODBYE_TEXT
    prices: Prices | None = None  # BOT_PRICES, JSON of Prices' fields (IDR)
    report_give_up_s: float = 900.0  # BOT_REPORT_GIVE_UP_SECONDS

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "BotSettings":
        env = dict(os.environ if env is None else env)
        missing = [name for name in ("SERVICE_URL", "RUNTIME_TOKEN") if not env.get(name)]
        if missing:
            raise SystemExit(f"Set {', '.join(missing)} (see the bridge's documentation).")
        prices = env.get("BOT_PRICES")
        return cls(
            service_url=env["SERVICE_URL"],
            runtime_token=env["RUNTIME_TOKEN"],
            did=env.get("BOT_DID") or "",
            caller_number=env.get("BOT_CALLER_NUMBER") or cls.caller_number,
            services=env.get("BOT_SERVICES") or cls.services,
            max_call_seconds=float(env["BOT_MAX_CALL_SECONDS"])
            if env.get("BOT_MAX_CALL_SECONDS")
            else None,
            goodbye_text=env.get("BOT_GOODBYE_TEXT") or None,
            prices=Prices(**json.loads(prices)) if prices else None,
            report_give_up_s=float(env.get("BOT_REPORT_GIVE_UP_SECONDS") or 900.0),
        )

    def options(self) -> BridgeOptions:
        return BridgeOptions(
            max_call_seconds=self.max_call_seconds,
            goodbye_text=self.goodbye_text,
            prices=self.prices,
            report_give_up_s=self.report_give_up_s,
        )


def error(status: int, code: str, message: str, details: Any = None) -> JSONResponse:
    """An error for the page, in the service's own shape."""
    body = {"code": code, "message": message, **({"details": details} if details else {})}
    return JSONResponse({"error": body}, status_code=status)


def same_origin(request: Request) -> bool:
    """Whether a request comes from the bot's own page (or from no page at all): another
    site's page may not start calls on the tenant's credit."""
    origin = request.headers.get("origin")
    return origin is None or urlsplit(origin).netloc == request.headers.get("host")


def create_app(settings: BotSettings, factory: ServicesFactory | None = None) -> FastAPI:
    """The bot's web app: the page and the offer endpoint."""
    services = factory or load_factory(settings.services)
    line: BrowserLine | None = None
    calls: set[asyncio.Task[None]] = set()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        nonlocal line
        async with RuntimeClient(settings.service_url, settings.runtime_token) as client:
            line = BrowserLine(client, caller_number=settings.caller_number)
            yield
            await line.close()
            if calls:
                await asyncio.wait(calls, timeout=STOP_WAIT_S)

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/")
    async def page() -> HTMLResponse:
        text = PAGE.read_text().replace("{{did}}", html.escape(settings.did, quote=True))
        return HTMLResponse(text)

    @app.get("/favicon.ico")
    async def favicon() -> Response:
        return Response(status_code=204)

    @app.post(OFFER_PATH)
    async def offer(request: Request) -> JSONResponse:
        """A browser's offer: answer it and start its call (request_data names the number,
        and any variables of the agent's prompt)."""
        if not same_origin(request):
            return error(403, "forbidden", "Offers come from the bot's own page.")
        try:
            body = await request.json()
            sdp, kind = body["sdp"], body["type"]
            data = body.get("request_data") or body.get("requestData") or {}
            did = str(data.get("did") or settings.did).strip()
            variables = data.get("variables") or None
            if not isinstance(sdp, str) or not isinstance(kind, str):
                raise TypeError
            if variables is not None and not isinstance(variables, dict):
                raise TypeError
        except (ValueError, KeyError, TypeError, AttributeError):
            return error(400, "bad_request", "Post {sdp, type, request_data: {did, variables}}.")
        if body.get("pc_id"):
            return error(400, "bad_request", "Each offer is a new call: none is renegotiated.")
        if not did:
            return error(400, "bad_request", "Name the number to call (BOT_DID or the page).")
        assert line is not None
        try:
            browser_call = await line.accept(sdp, kind, did=did, variables=variables)
        except ValueError as exc:
            return error(400, "bad_offer", str(exc))
        except CallRejected as exc:
            return error(409, exc.code, exc.message)
        except ValidationFailed as exc:
            return error(422, exc.code, exc.message, exc.details)
        except RuntimeAPIError as exc:
            return error(502, exc.code, f"The service did not start the call: {exc.message}")
        runner_args = BrowserBotArguments(
            browser_call.connection,
            browser_call=browser_call,
            line=line,
            services=services,
            options=settings.options(),
        )
        task = asyncio.create_task(bot(runner_args), name=f"call {browser_call.call.id}")
        calls.add(task)
        task.add_done_callback(calls.discard)
        return JSONResponse(browser_call.answer())

    return app


def main() -> None:
    import uvicorn
    from dotenv import load_dotenv
    from loguru import logger

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8766)
    args = parser.parse_args()
    # The environment wins over the file.
    load_dotenv(Path(__file__).with_name(".env"))
    level = (os.environ.get("LOG_LEVEL") or "INFO").upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # Pipecat logs through loguru, at DEBUG unless told otherwise.
    logger.remove()
    logger.add(sys.stderr, level=level)
    addresses = serving_addresses(args.host)
    if addresses is not None:
        gather_candidates_on(addresses)
    uvicorn.run(create_app(BotSettings.from_env()), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
