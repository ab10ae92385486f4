"""The WhatsApp bot's calls: Pipecat's `bot()` entry point, run once for each answered call.

server.py receives Meta's webhooks; the line (voiceagent_bridge.whatsapp) starts each user's
call with the service and answers it over WebRTC, or places a business-initiated call the
service queued, and hands the answered call to `bot`, which runs the call's agent through its
`CallBridge` with the services that the factory named by BOT_SERVICES makes: by default
`gemini_live_services` (voiceagent_bridge.services), Gemini Live speech to speech, the agent's
voice being one of Gemini's own.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass

from voiceagent_bridge.bridge import RealtimeServices, VoiceServices
from voiceagent_bridge.client import Call, Session
from voiceagent_bridge.services import (  # BOT_SERVICES' choices
    gemini_live_services as gemini_live_services,
)
from voiceagent_bridge.services import openai_services as openai_services
from voiceagent_bridge.whatsapp import WhatsAppCall, WhatsAppLine

log = logging.getLogger("bots.whatsapp")

ServicesFactory = Callable[[Call, Session], VoiceServices | RealtimeServices]


@dataclass
class WhatsAppBotArguments:
    """One answered call: the line that holds it and the call."""

    line: WhatsAppLine
    call: WhatsAppCall


async def bot(runner_args: WhatsAppBotArguments) -> None:
    """One call, from its answer to its last report (the line's pipeline for it)."""
    log.info("call %s: %s", runner_args.call.bridge.call.id, runner_args.call.direction)
    await runner_args.line.converse(runner_args.call)


async def run_call(line: WhatsAppLine, call: WhatsAppCall) -> None:
    """The line's hook: each answered call goes to `bot`."""
    await bot(WhatsAppBotArguments(line, call))
