"""voiceagent_bridge.whatsapp's pieces on their own: Meta's payloads read tolerantly, the
signature and the subscription check, the Graph client's errors (against a real HTTP server on
127.0.0.1), and the prices of Gemini's usage."""

import asyncio
import json

import pytest

from tests.receiver import Answer, Receiver
from voiceagent_bridge.bridge import Prices, Usage
from voiceagent_bridge.client import Session, WhatsAppNumber
from voiceagent_bridge.services import gemini_language, gemini_system_instruction
from voiceagent_bridge.whatsapp import (
    NO_CALL_PERMISSION,
    CallEvent,
    GraphAPI,
    GraphError,
    StatusEvent,
    event_from_json,
    event_to_json,
    parse_webhook,
    sign,
    signature_valid,
    verify_subscription,
    whatsapp_sdp,
)

METADATA = {"display_phone_number": "6221777001", "phone_number_id": "pn-1"}


def payload(*changes) -> dict:
    return {"object": "whatsapp_business_account", "entry": [{"id": "w", "changes": list(changes)}]}


def test_a_users_connect_a_real_terminate_and_statuses_are_read():
    value = {
        "messaging_product": "whatsapp",
        "metadata": METADATA,
        "calls": [
            {
                "id": "wacid.1",
                "from": "6281200000001",
                "to": "6221777001",
                "event": "connect",
                "direction": "USER_INITIATED",
                "session": {"sdp_type": "offer", "sdp": "v=0"},
            },
            # A terminate as Meta sends it: strings for times, errors, no session.
            {
                "id": "wacid.2",
                "from": "6281200000001",
                "to": "6221777001",
                "event": "terminate",
                "direction": "BUSINESS_INITIATED",
                "status": "FAILED",
                "start_time": "1700000000",
                "end_time": "1700000005",
                "duration": "5",
                "biz_opaque_callback_data": "call_x",
                "errors": [{"code": 138021, "message": "Unreachable"}],
            },
            {"id": "wacid.3", "event": "something_new"},
            "garbage",
        ],
        "statuses": [
            {
                "id": "wacid.2",
                "type": "call",
                "status": "ringing",
                "biz_opaque_callback_data": "call_x",
            },
            {"id": "wamid.9", "type": "message", "status": "delivered"},
        ],
    }
    found = parse_webhook(payload({"field": "calls", "value": value}))
    connect, terminate, status = found.events
    assert connect == CallEvent(
        phone_number_id="pn-1",
        call_id="wacid.1",
        event="connect",
        user="6281200000001",
        direction="USER_INITIATED",
        sdp="v=0",
        sdp_type="offer",
    )
    assert (terminate.duration, terminate.status, terminate.opaque) == (5, "FAILED", "call_x")
    assert terminate.user == "6221777001"  # a business's call: the user is its "to"
    assert terminate.errors == ({"code": 138021, "message": "Unreachable"},)
    assert status == StatusEvent("pn-1", "wacid.2", "RINGING", "call_x")
    assert found.numbers == {"pn-1"}
    # Relayed between processes as JSON, unchanged.
    assert [event_from_json(event_to_json(e)) for e in found.events] == found.events


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        {"entry": "x"},
        {"entry": [{"changes": [{"field": "calls", "value": {"calls": [{"id": "c"}]}}]}]},
        {"entry": [{"changes": [{"field": "account_update", "value": {"metadata": METADATA}}]}]},
    ],
)
def test_anything_else_is_left_out(body):
    found = parse_webhook(body)
    assert (found.events, found.messages) == ([], [])


def test_messages_values_are_kept_whole():
    value = {
        "messaging_product": "whatsapp",
        "metadata": METADATA,
        "messages": [{"type": "interactive", "interactive": {"type": "call_permission_reply"}}],
    }
    found = parse_webhook(payload({"field": "messages", "value": value}))
    assert found.messages == [value] and found.numbers == {"pn-1"}


def test_the_signature_and_the_subscription_check():
    body = b'{"a": 1}'
    assert signature_valid(body, sign(body, "secret"), "secret")
    assert not signature_valid(body, sign(body, "other"), "secret")
    assert not signature_valid(body + b" ", sign(body, "secret"), "secret")
    assert not signature_valid(body, None, "secret")
    assert not signature_valid(body, sign(body, "secret").removeprefix("sha256="), "secret")
    params = {"hub.mode": "subscribe", "hub.verify_token": "t", "hub.challenge": "99"}
    assert verify_subscription(params, "t") == "99"
    assert verify_subscription({**params, "hub.verify_token": "u"}, "t") is None
    assert verify_subscription({**params, "hub.mode": "x"}, "t") is None
    assert verify_subscription(params, "") is None


def test_an_sdp_keeps_only_sha_256_fingerprints():
    sdp = "v=0\r\na=fingerprint:sha-256 AA\r\na=fingerprint:sha-512 BB\r\na=setup:actpass\r\n"
    assert whatsapp_sdp(sdp) == "v=0\r\na=fingerprint:sha-256 AA\r\na=setup:actpass\r\n"


def test_graph_errors_carry_metas_code():
    def answer(request):
        body = json.loads(request.body)
        if body["to"] == "1":
            error = {"message": "No permission", "code": NO_CALL_PERMISSION}
            return Answer(status=400, body=json.dumps({"error": error}).encode())
        if body["to"] == "2":
            return Answer(status=502, body=b"<html>")
        return Answer(body=json.dumps({"calls": [{"id": "wacid.7"}]}).encode())

    with Receiver(answer) as graph:
        number = WhatsAppNumber("pn-1", "+6221777001", "token", "secret", graph.url)

        async def connect(to: str):
            api = GraphAPI(timeout_s=5)
            try:
                return await api.connect(number, to, "v=0", "call_1")
            except GraphError as exc:
                return exc
            finally:
                await api.close()

        refused, broken, placed = (asyncio.run(connect(to)) for to in ("1", "2", "3"))
        assert (refused.status, refused.code) == (400, NO_CALL_PERMISSION)
        assert (broken.status, broken.code) == (502, 0)
        assert placed == "wacid.7"
        sent = graph.requests[-1]
        assert sent.path == "/pn-1/calls"
        assert sent.headers["Authorization"] == "Bearer token"
        assert json.loads(sent.body) == {
            "messaging_product": "whatsapp",
            "to": "3",
            "action": "connect",
            "session": {"sdp_type": "offer", "sdp": "v=0"},
            "biz_opaque_callback_data": "call_1",
        }


def test_a_numbers_secrets_never_show_in_its_repr():
    number = WhatsAppNumber("pn-1", "+6221777001", "token-value", "secret-value", "http://x")
    assert "token-value" not in repr(number) and "secret-value" not in repr(number)


def test_audio_tokens_are_priced_apart_when_they_have_a_price():
    usage = Usage(prompt_tokens=1000, completion_tokens=200)
    usage.input_audio_tokens, usage.output_audio_tokens = 600, 150
    text_only = Prices(llm_input_per_million_tokens=1e6, llm_output_per_million_tokens=1e6)
    assert usage.cost(text_only, 10).llm == 1200
    audio = Prices(
        llm_input_per_million_tokens=1e6,
        llm_output_per_million_tokens=1e6,
        llm_input_audio_per_million_tokens=2e6,
        llm_output_audio_per_million_tokens=4e6,
    )
    assert usage.cost(audio, 10).llm == 400 + 50 + 1200 + 600
    assert usage.cost(audio, 10, telephony=7).telephony == 7


def test_the_agents_language_for_gemini():
    assert gemini_language("id") == ("id-ID", "Bahasa Indonesia")
    assert gemini_language("en-GB") == ("en-GB", "en-GB")
    session = Session.from_json(
        {"agentId": "a", "systemPrompt": "Be kind.", "language": "id", "maxCallDurationSeconds": 9}
    )
    assert gemini_system_instruction(session) == (
        "Be kind.\n\nSpeak Bahasa Indonesia (id-ID) throughout the call."
    )
