"""Scripted speech and language services: Pipecat's STT, LLM and TTS extension points with
no provider behind them, for the bridge's tests.

The caller's side is a script per caller number (SCRIPTED_CALLERS, JSON): each burst of
sound the phone sends is heard as the script's next line. The LLM follows simple rules on
the context it is given:
- "Who are you?" is answered with the system instruction;
- "call NAME {json}" makes it call the function NAME with those arguments;
- a function's answer is read back as "The function answered: {json}";
- anything else is answered "You said: …".
The TTS speaks a tone of TTS_MS_PER_CHARACTER per character of the text.
"""

import array
import json
import math
import os
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from pipecat.frames.frames import (
    Frame,
    FunctionCallFromLLM,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
)
from pipecat.metrics.metrics import LLMTokenUsage
from pipecat.processors.aggregators.llm_response_universal import LLMUserAggregatorParams
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.llm_service import LLMService
from pipecat.services.settings import LLMSettings, STTSettings, TTSSettings
from pipecat.services.stt_service import STTService
from pipecat.services.tts_service import TTSService
from pipecat.turns.user_start import TranscriptionUserTurnStartStrategy
from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from pipecat.utils.time import time_now_iso8601

from voiceagent_bridge.bridge import VoiceServices
from voiceagent_bridge.client import Call, Session

TTS_MS_PER_CHARACTER = 10
LOUD = 1000  # RMS of 16-bit samples above which the caller is speaking
PAUSE_MS = 200  # this much quiet after speaking ends a line


def rms(pcm: bytes) -> float:
    samples = array.array("h", pcm[: len(pcm) // 2 * 2])
    if not samples:
        return 0.0
    return math.sqrt(sum(sample * sample for sample in samples) / len(samples))


class ScriptedSTT(STTService):
    """Hears each burst of sound as the next line of its script."""

    def __init__(self, lines: list[str], **kwargs: Any) -> None:
        super().__init__(
            settings=STTSettings(model=None, language=None), ttfs_p99_latency=0.3, **kwargs
        )
        self.lines = list(lines)
        self.speaking = False
        self.quiet_ms = 0.0

    def can_generate_metrics(self) -> bool:
        return True

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame | None, None]:
        chunk_ms = len(audio) / 2 / self.sample_rate * 1000
        if rms(audio) > LOUD:
            self.speaking, self.quiet_ms = True, 0.0
        elif self.speaking:
            self.quiet_ms += chunk_ms
            if self.quiet_ms >= PAUSE_MS:
                self.speaking = False
                if self.lines:
                    await self.emit_stt_usage_metrics()
                    yield TranscriptionFrame(
                        self.lines.pop(0), "caller", time_now_iso8601(), finalized=True
                    )
        yield None


def scripted_settings(system_instruction: str | None) -> LLMSettings:
    return LLMSettings(
        model="scripted",
        system_instruction=system_instruction,
        temperature=None,
        max_tokens=None,
        top_p=None,
        top_k=None,
        frequency_penalty=None,
        presence_penalty=None,
        seed=None,
        filter_incomplete_user_turns=None,
        user_turn_completion_config=None,
    )


def text_of(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


class ScriptedLLM(LLMService):
    """Answers the last message of its context by the rules in the module's docstring."""

    def __init__(self, system_instruction: str | None = None, **kwargs: Any) -> None:
        super().__init__(settings=scripted_settings(system_instruction), **kwargs)
        self.system_instruction = system_instruction or ""

    def can_generate_metrics(self) -> bool:
        return True

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if not isinstance(frame, LLMContextFrame):
            await self.push_frame(frame, direction)
            return
        messages = [m for m in frame.context.get_messages() if isinstance(m, dict)]
        if not messages:
            return
        last = messages[-1]
        await self.push_frame(LLMFullResponseStartFrame())
        reply = ""
        if last.get("role") == "tool":
            reply = f"The function answered: {text_of(last)}"
        elif last.get("role") == "user":
            said = text_of(last).strip()
            if said.startswith("call "):
                _, name, arguments = said.split(" ", 2)
                await self.run_function_calls(
                    [
                        FunctionCallFromLLM(
                            function_name=name,
                            tool_call_id=f"tool_{uuid.uuid4().hex[:12]}",
                            arguments=json.loads(arguments),
                            context=frame.context,
                        )
                    ]
                )
            elif said == "Who are you?":
                reply = self.system_instruction
            else:
                reply = f"You said: {said}"
        if reply:
            await self.push_frame(LLMTextFrame(reply))
        prompt = sum(len(text_of(message)) for message in messages) // 4
        await self.start_llm_usage_metrics(
            LLMTokenUsage(
                prompt_tokens=prompt,
                completion_tokens=len(reply) // 4,
                total_tokens=prompt + len(reply) // 4,
            )
        )
        await self.push_frame(LLMFullResponseEndFrame())


class ScriptedTTS(TTSService):
    """Speaks a 440 Hz tone, TTS_MS_PER_CHARACTER for each character of the text."""

    def __init__(self, **kwargs: Any) -> None:
        # As Pipecat's HTTP services do: the base class opens and closes each utterance.
        super().__init__(
            settings=TTSSettings(model=None, voice=None, language=None),
            push_start_frame=True,
            push_stop_frames=True,
            **kwargs,
        )

    def can_generate_metrics(self) -> bool:
        return True

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        await self.start_tts_usage_metrics(text)
        samples = int(self.sample_rate * len(text) * TTS_MS_PER_CHARACTER / 1000)
        tone = array.array(
            "h",
            (
                int(8000 * math.sin(2 * math.pi * 440 * i / self.sample_rate))
                for i in range(samples)
            ),
        )
        yield TTSAudioRawFrame(tone.tobytes(), self.sample_rate, 1, context_id=context_id)


BROKEN = "+6281100000009"  # a caller whose call the factory fails to set up


def services(call: Call, session: Session) -> VoiceServices:
    """The bot's services factory (BOT_SERVICES=tests.bridge.scripted:services)."""
    scripts = json.loads(os.environ.get("SCRIPTED_CALLERS") or "{}")
    # The caller of an inbound call, the callee of an outbound one.
    other = call.caller_number if call.direction == "inbound" else call.callee_number
    if other == BROKEN:
        raise RuntimeError("no services for this caller")
    return VoiceServices(
        stt=ScriptedSTT(scripts.get(other, [])),
        llm=ScriptedLLM(system_instruction=session.system_prompt),
        tts=ScriptedTTS(),
        user_params=LLMUserAggregatorParams(
            user_turn_strategies=UserTurnStrategies(
                start=[TranscriptionUserTurnStartStrategy()],
                stop=[SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=0.2)],
            )
        ),
    )
