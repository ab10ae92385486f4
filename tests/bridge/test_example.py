"""The Twilio bot's own pieces: Twilio's signature, its settings, its default services."""

import xml.etree.ElementTree as ET

import pytest

from bot import openai_services
from server import BotSettings
from voiceagent_bridge.client import Call, FunctionSpec, Session
from voiceagent_bridge.twilio import stream_twiml, stream_url, twilio_signature

REQUIRED = {
    "SERVICE_URL": "http://127.0.0.1:5000",
    "RUNTIME_TOKEN": "token",
    "PUBLIC_URL": "https://bot.example.test/",
    "TWILIO_ACCOUNT_SID": "AC123",
    "TWILIO_AUTH_TOKEN": "secret",
}


def test_twilio_signature_matches_twilios_own_example():
    # The request validator test vector of Twilio's own SDKs.
    params = {
        "CallSid": "CA1234567890ABCDE",
        "Caller": "+14158675309",
        "Digits": "1234",
        "From": "+14158675309",
        "To": "+18005551212",
    }
    url = "https://mycompany.com/myapp.php?foo=1&bar=2"
    assert twilio_signature("12345", url, params) == "RSOYDt4T1cUTdK1PDd93/VVr8B8="


def test_settings_come_from_the_environment_and_name_what_is_missing():
    settings = BotSettings.from_env({**REQUIRED, "BOT_MAX_CALL_SECONDS": "90"})
    assert stream_url(settings.public_url) == "wss://bot.example.test/twilio/stream"
    assert settings.options().max_call_seconds == 90 and settings.dispatch is False
    with pytest.raises(SystemExit, match="Set RUNTIME_TOKEN, TWILIO_AUTH_TOKEN"):
        BotSettings.from_env({**REQUIRED, "RUNTIME_TOKEN": "", "TWILIO_AUTH_TOKEN": ""})


def test_stream_twiml_carries_any_parameter_value_intact():
    twiml = stream_twiml("wss://bot/twilio/stream?a=1&b=2", {"from_number": "\"'<&>"})
    stream = ET.fromstring(twiml).find("./Connect/Stream")
    assert stream.get("url") == "wss://bot/twilio/stream?a=1&b=2"
    assert [(p.get("name"), p.get("value")) for p in stream] == [("from_number", "\"'<&>")]


def test_the_default_services_are_built_for_the_agent(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    session = Session(
        agent_id="agent_1",
        system_prompt="You sell solar panels.",
        voice_id="Kore",
        greeting_text="Halo!",
        language="id",
        escalation_number=None,
        tools_enabled=(),
        functions=(FunctionSpec("lookup", "Look up.", {"type": "object"}),),
        max_call_duration_seconds=600,
    )
    call = Call.from_json({"id": "call_1", "status": "ringing"})
    services = openai_services(call, session)
    assert type(services.llm).__name__ == "OpenAILLMService"
    assert type(services.stt).__name__ == "OpenAISTTService"
    assert type(services.tts).__name__ == "OpenAITTSService"
    assert services.user_params is not None and services.user_params.vad_analyzer is not None
