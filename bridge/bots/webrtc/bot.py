"""The browser bot's calls: Pipecat's `bot()` entry point, run once for each browser's call.

server.py answers a browser's WebRTC offer and starts its call with the service, then hands
the connection to `bot`, which runs the call's agent on it through a `CallBridge`, with the
speech and language services that the factory named by BOT_SERVICES makes (by default
`openai_services`, from voiceagent_bridge.services: OpenAI for all three). The page hears the
agent, and is sent each turn of the transcript as it is added.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipecat.pipeline.worker import PipelineParams
from pipecat.runner.types import SmallWebRTCRunnerArguments
from pipecat.transports.base_transport import BaseTransport
from pipecat.workers.runner import WorkerRunner

from voiceagent_bridge.bridge import BridgeOptions, CallBridge, VoiceServices
from voiceagent_bridge.client import Call, Session, Turn
from voiceagent_bridge.services import openai_services as openai_services  # BOT_SERVICES' default
from voiceagent_bridge.webrtc import BrowserCall, BrowserLine

log = logging.getLogger("bots.webrtc")

ServicesFactory = Callable[[Call, Session], VoiceServices]


@dataclass
class BrowserBotArguments(SmallWebRTCRunnerArguments):
    """Pipecat's runner arguments of a WebRTC connection, with the call the server started
    for it, the bot's line to the service, the services factory and the bridge's options."""

    browser_call: BrowserCall = field(kw_only=True)
    line: BrowserLine = field(kw_only=True)
    services: ServicesFactory = field(kw_only=True)
    options: BridgeOptions = field(kw_only=True, default_factory=BridgeOptions)


async def bot(runner_args: BrowserBotArguments) -> None:
    """One call, from the browser's connection to its last report."""
    line, browser_call = runner_args.line, runner_args.browser_call
    connection = browser_call.connection

    def show(turn: Turn) -> None:
        connection.send_app_message({"type": "turn", "role": turn.role, "text": turn.text})

    bridge = CallBridge(
        line.client,
        browser_call.call,
        browser_call.session,
        options=runner_args.options,
        features=line.features,
        started=browser_call.started,
        on_turn=show,
    )
    line.active[bridge.call.id] = bridge
    try:
        await run_bot(line.transport(browser_call), bridge, runner_args)
    except Exception:
        log.exception("call %s failed in the runtime", bridge.call.id)
        bridge.end_now("runtime_error", initiator="system")
    finally:
        line.active.pop(bridge.call.id, None)
    # However the call ended, its connection closes with it: the page learns so from that.
    await connection.disconnect()
    if not await bridge.finish():
        log.error("call %s: some of its reports never reached the service", bridge.call.id)


async def run_bot(
    transport: BaseTransport, bridge: CallBridge, runner_args: BrowserBotArguments
) -> None:
    """The conversation: Pipecat's pipeline on the browser's audio, until it ends."""
    worker = bridge.build_worker(
        transport,
        runner_args.services(bridge.call, bridge.session),
        # Pipecat's own rates: 16 kHz in, 24 kHz out (Opus carries 48 kHz on the wire).
        params=PipelineParams(enable_metrics=True, enable_usage_metrics=True),
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
