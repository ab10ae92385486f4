"""The bots' default speech and language services: OpenAI for all three, or Gemini Live.

A services factory takes a call and its session and returns the call's `VoiceServices`; a bot
names the one it uses in BOT_SERVICES (module:function), and `openai_services` is the model
to copy for another provider. `gemini_live_services` is the WhatsApp bot's default: one
speech-to-speech service in place of the three.
"""

import importlib
import os
from typing import Any

from voiceagent_bridge.bridge import RealtimeServices, VoiceServices, session_tools
from voiceagent_bridge.client import Call, Session

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


# The agent's language (the service's codes) as Gemini Live's language code, and its name for
# the system instruction.
GEMINI_LANGUAGES = {
    "id": ("id-ID", "Bahasa Indonesia"),
    "en": ("en-US", "English"),
    "ms": ("ms-MY", "Bahasa Melayu"),
    "jv": ("jv-ID", "Javanese"),
    "su": ("su-ID", "Sundanese"),
}


def gemini_language(language: str) -> tuple[str, str]:
    """Gemini Live's language code for the agent's language, and the language's name: `id`
    is `id-ID`; a code that names its region already (en-GB) is taken as it is."""
    code = (language or "id").strip()
    if code in GEMINI_LANGUAGES:
        return GEMINI_LANGUAGES[code]
    return code, code


def gemini_system_instruction(session: Session) -> str:
    """The session's prompt (its variables filled in), with the language stated: Gemini
    Live's language code sets its speech, the instruction what it answers in."""
    code, name = gemini_language(session.language)
    return f"{session.system_prompt}\n\nSpeak {name} ({code}) throughout the call."


def gemini_live_services(
    call: Call,
    session: Session,
    *,
    service_class: type[Any] | None = None,
    api_key: str | None = None,
) -> RealtimeServices:
    """Gemini Live for the whole conversation (GOOGLE_API_KEY, or GEMINI_API_KEY; the model
    GEMINI_LIVE_MODEL, else Pipecat's default): it hears the caller and speaks in the
    agent's voice (the service's voices are Gemini's own: Puck, Charon, Kore, Fenrir,
    Aoede), with the agent's functions as its tools. service_class replaces
    GeminiLiveLLMService by a subclass of it (one whose create_client makes another client,
    say)."""
    from pipecat.processors.aggregators.llm_response_universal import LLMUserAggregatorParams
    from pipecat.services.google.gemini_live.llm import GeminiLiveLLMService
    from pipecat.turns.user_start import ExternalUserTurnStartStrategy
    from pipecat.turns.user_stop import ExternalUserTurnStopStrategy
    from pipecat.turns.user_turn_strategies import UserTurnStrategies

    kind = service_class or GeminiLiveLLMService
    key = api_key or os.environ.get("GOOGLE_API_KEY") or os.environ.get("GEMINI_API_KEY") or ""
    code, _ = gemini_language(session.language)
    settings = kind.Settings(voice=session.voice_id or "Puck", language=code)
    model = os.environ.get("GEMINI_LIVE_MODEL")
    if model:
        settings.model = model
    llm = kind(
        api_key=key,
        system_instruction=gemini_system_instruction(session),
        tools=session_tools(session),
        settings=settings,
    )
    # Gemini hears the caller and tells when they are done (its own activity detection):
    # Pipecat's turn strategies only wait for its transcriptions.
    strategies = UserTurnStrategies(
        start=[ExternalUserTurnStartStrategy()], stop=[ExternalUserTurnStopStrategy()]
    )
    return RealtimeServices(
        llm=llm, user_params=LLMUserAggregatorParams(user_turn_strategies=strategies)
    )


def load_factory(path: str) -> Any:
    """The services factory a bot's BOT_SERVICES names as module:function."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)
