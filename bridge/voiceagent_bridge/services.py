"""The bots' default speech and language services: OpenAI for all three.

A services factory takes a call and its session and returns the call's `VoiceServices`; a bot
names the one it uses in BOT_SERVICES (module:function), and `openai_services` is the model
to copy for another provider.
"""

import os

from voiceagent_bridge.bridge import VoiceServices
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
