"""The Twilio bot's calls: Pipecat's `bot()` entry point, run once for each media stream.

server.py answers Twilio's webhooks and hands each media stream Twilio opens to `bot`, which
checks it, starts (or takes up) its call with the service, and runs the call's agent on it
through a `CallBridge`, with the speech and language services that the factory named by
BOT_SERVICES makes (by default `openai_services`, from voiceagent_bridge.services: OpenAI for
all three).
"""

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipecat.pipeline.worker import PipelineParams
from pipecat.runner.types import WebSocketRunnerArguments
from pipecat.transports.base_transport import BaseTransport
from pipecat.workers.runner import WorkerRunner

from voiceagent_bridge.bridge import BridgeOptions, CallBridge, VoiceServices
from voiceagent_bridge.client import Call, Session
from voiceagent_bridge.services import openai_services as openai_services  # BOT_SERVICES' default
from voiceagent_bridge.twilio import TWILIO_RATE, TwilioLine

log = logging.getLogger("bots.twilio")

ServicesFactory = Callable[[Call, Session], VoiceServices]


@dataclass
class TwilioBotArguments(WebSocketRunnerArguments):
    """Pipecat's runner arguments of a media stream, with what the server holds for every
    call: its line to the service and Twilio, the services factory, the bridge's options."""

    line: TwilioLine = field(kw_only=True)
    services: ServicesFactory = field(kw_only=True)
    options: BridgeOptions = field(kw_only=True, default_factory=BridgeOptions)


async def bot(runner_args: TwilioBotArguments) -> None:
    """One call, from its media stream to its last report."""
    line, websocket = runner_args.line, runner_args.websocket
    stream = await line.accept(websocket)
    if stream is None:
        return
    call = stream.call
    bridge = CallBridge(
        line.client,
        call,
        stream.session,
        options=runner_args.options,
        features=line.features,
        started=stream.started,
    )
    line.active.add(call.id)
    try:
        await run_bot(line.transport(websocket, stream), bridge, runner_args)
    except Exception:
        log.exception("call %s failed in the runtime", call.id)
        bridge.end_now("runtime_error", initiator="system")
        with contextlib.suppress(Exception):  # the stream may be gone already
            await websocket.close()  # Twilio ends the call with it
    finally:
        line.active.discard(call.id)
    if not await bridge.finish():
        log.error("call %s: some of its reports never reached the service", call.id)


async def run_bot(
    transport: BaseTransport, bridge: CallBridge, runner_args: TwilioBotArguments
) -> None:
    """The conversation: Pipecat's pipeline on the call's media stream, until it ends."""
    worker = bridge.build_worker(
        transport,
        runner_args.services(bridge.call, bridge.session),
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

    runner = WorkerRunner(handle_sigint=runner_args.handle_sigint)
    await runner.add_workers(worker)
    await runner.run()
