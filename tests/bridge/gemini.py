"""A scripted Gemini Live: the real GeminiLiveLLMService, its client made by `create_client`
(the service's own hook for another client) a stand-in that plays the model's side of a Live
session with no network at all.

The caller's side is a script per WhatsApp user (SCRIPTED_CALLERS, JSON, by the user's number):
each burst of sound the user sends is heard, and transcribed, as the script's next line. The
model then follows simple rules, as tests/bridge/scripted.py's LLM does:
- a "Say exactly …: "TEXT"" turn (the greeting, the goodbye) is answered with TEXT;
- "Who are you?" is answered with the system instruction's first line;
- "call NAME {json}" makes it call the function NAME with those arguments;
- a function's answer is read back as "The function answered: {json}";
- anything else is answered "You said: …".
Each answer is a tone of TTS_MS_PER_CHARACTER per character as the model's audio, its text as
the output transcription, and the usage of USAGE per turn. Each session's configuration (model,
voice, language, system instruction, tools) is written to SCRIPTED_GEMINI_LOG (a folder) as
JSON, for the tests to read.
"""

import array
import asyncio
import json
import math
import os
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from google.genai import types
from pipecat.services.google.gemini_live.llm import GeminiLiveLLMService

from voiceagent_bridge.bridge import RealtimeServices
from voiceagent_bridge.client import Call, Session
from voiceagent_bridge.services import gemini_live_services

TTS_MS_PER_CHARACTER = 10
OUT_RATE = 24_000
LOUD = 1000
PAUSE_MS = 200
# Per answered turn: prompt tokens (of them audio), response tokens (of them audio).
USAGE = {"prompt": 1000, "prompt_audio": 600, "response": 200, "response_audio": 150}
SAY_EXACTLY = re.compile(r'Say exactly this[^"]*"(.*)"\s*$', re.S)


def rms(pcm: bytes) -> float:
    samples = array.array("h", pcm[: len(pcm) // 2 * 2])
    if not samples:
        return 0.0
    return math.sqrt(sum(sample * sample for sample in samples) / len(samples))


def tone(text: str) -> bytes:
    samples = int(OUT_RATE * len(text) * TTS_MS_PER_CHARACTER / 1000)
    return array.array(
        "h", (int(8000 * math.sin(2 * math.pi * 440 * i / OUT_RATE)) for i in range(samples))
    ).tobytes()


def usage() -> types.UsageMetadata:
    return types.UsageMetadata(
        prompt_token_count=USAGE["prompt"],
        response_token_count=USAGE["response"],
        prompt_tokens_details=[
            types.ModalityTokenCount(
                modality=types.MediaModality.AUDIO, token_count=USAGE["prompt_audio"]
            )
        ],
        response_tokens_details=[
            types.ModalityTokenCount(
                modality=types.MediaModality.AUDIO, token_count=USAGE["response_audio"]
            )
        ],
    )


class ScriptedSession:
    """The model's side of one Live session."""

    def __init__(self, config: types.LiveConnectConfig, lines: list[str]) -> None:
        self.config = config
        self.lines = list(lines)
        self.queue: asyncio.Queue[types.LiveServerMessage] = asyncio.Queue()
        self.speaking = False
        self.quiet_ms = 0.0
        self.closed = False
        self.pending: list[str] = []

    @property
    def instruction(self) -> str:
        content = self.config.system_instruction
        if isinstance(content, types.Content):
            return "".join(part.text or "" for part in content.parts or ())
        return str(content or "")

    async def receive(self) -> AsyncIterator[types.LiveServerMessage]:
        while True:
            message = await self.queue.get()
            yield message
            content = message.server_content
            if message.tool_call or (content is not None and content.turn_complete):
                return

    async def close(self) -> None:
        self.closed = True

    def answer(self, text: str) -> None:
        audio = tone(text)
        chunk = OUT_RATE * 2 // 25  # 40 ms
        for start in range(0, len(audio), chunk):
            part = types.Part(
                inline_data=types.Blob(
                    data=audio[start : start + chunk], mime_type=f"audio/pcm;rate={OUT_RATE}"
                )
            )
            self.queue.put_nowait(
                types.LiveServerMessage(
                    server_content=types.LiveServerContent(
                        model_turn=types.Content(role="model", parts=[part])
                    )
                )
            )
        self.queue.put_nowait(
            types.LiveServerMessage(
                server_content=types.LiveServerContent(
                    output_transcription=types.Transcription(text=text)
                )
            )
        )
        self.queue.put_nowait(
            types.LiveServerMessage(
                server_content=types.LiveServerContent(turn_complete=True), usage_metadata=usage()
            )
        )

    def hear(self, line: str) -> None:
        self.queue.put_nowait(
            types.LiveServerMessage(
                server_content=types.LiveServerContent(
                    input_transcription=types.Transcription(text=line)
                )
            )
        )
        if line.startswith("call "):
            _, name, arguments = line.split(" ", 2)
            call = types.FunctionCall(
                id=f"fc-{uuid.uuid4().hex[:8]}", name=name, args=json.loads(arguments)
            )
            self.queue.put_nowait(
                types.LiveServerMessage(tool_call=types.LiveServerToolCall(function_calls=[call]))
            )
        elif line.strip() == "Who are you?":
            self.answer(self.instruction.split("\n")[0])
        else:
            self.answer(f"You said: {line}")

    async def send_client_content(self, *, turns: Any = None, turn_complete: bool = True) -> None:
        texts, self.pending = self.pending, []
        for turn in turns or ():
            parts = turn.parts if isinstance(turn, types.Content) else turn.get("parts", [])
            for part in parts or ():
                text = part.text if isinstance(part, types.Part) else part.get("text")
                if text:
                    texts.append(text)
        if not turn_complete:
            self.pending = texts  # content taken in, answered when the turn completes
            return
        said = SAY_EXACTLY.search(texts[-1]) if texts else None
        if said:
            self.answer(said.group(1))
        elif texts:
            self.answer("Hello.")

    async def send_realtime_input(self, *, audio: Any = None, **_: Any) -> None:
        if audio is None:
            return
        pcm = audio.data
        rate = int(str(audio.mime_type).rsplit("=", 1)[-1]) if "rate=" in audio.mime_type else 16000
        chunk_ms = len(pcm) / 2 / rate * 1000
        if rms(pcm) > LOUD:
            self.speaking, self.quiet_ms = True, 0.0
        elif self.speaking:
            self.quiet_ms += chunk_ms
            if self.quiet_ms >= PAUSE_MS:
                self.speaking = False
                self.hear(self.lines.pop(0) if self.lines else "…")

    async def send_tool_response(self, *, function_responses: Any) -> None:
        responses = (
            function_responses if isinstance(function_responses, list) else [function_responses]
        )
        for response in responses:
            self.answer(f"The function answered: {json.dumps(response.response, sort_keys=True)}")


def _get(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


class ScriptedLive:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    @asynccontextmanager
    async def connect(
        self, *, model: str, config: types.LiveConnectConfig
    ) -> AsyncIterator[ScriptedSession]:
        session = ScriptedSession(config, self.lines)
        folder = os.environ.get("SCRIPTED_GEMINI_LOG")
        if folder:
            speech = config.generation_config.speech_config if config.generation_config else None
            voice = (
                speech.voice_config.prebuilt_voice_config.voice_name
                if speech and speech.voice_config and speech.voice_config.prebuilt_voice_config
                else None
            )
            tools = [
                _get(declaration, "name")
                for tool in config.tools or ()
                for declaration in (_get(tool, "function_declarations") or ())
            ]
            record = {
                "model": model,
                "voice": voice,
                "language": speech.language_code if speech else None,
                "systemInstruction": session.instruction,
                "tools": tools,
            }
            path = Path(folder) / f"{uuid.uuid4().hex}.json"
            path.write_text(json.dumps(record))
        yield session


class ScriptedClient:
    """What create_client makes: `aio.live.connect` opens a scripted session."""

    def __init__(self, lines: list[str]) -> None:
        self.aio = type("Aio", (), {})()
        self.aio.live = ScriptedLive(lines)


class ScriptedGeminiLive(GeminiLiveLLMService):
    """Gemini Live with the scripted client: set `lines` before the service is built."""

    lines: list[str] = []

    def create_client(self) -> None:
        self._client = ScriptedClient(list(self.lines))


def services(call: Call, session: Session) -> RealtimeServices:
    """The bot's services factory in the tests (BOT_SERVICES=tests.bridge.gemini:services)."""
    scripts = json.loads(os.environ.get("SCRIPTED_CALLERS") or "{}")
    user = call.caller_number if call.direction == "inbound" else call.callee_number
    kind = type("Scripted", (ScriptedGeminiLive,), {"lines": list(scripts.get(user, []))})
    return gemini_live_services(call, session, service_class=kind, api_key="scripted")
