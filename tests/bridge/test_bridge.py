"""The bridge in Pipecat's own test pipeline (pipecat.tests.utils.run_test): the scripted LLM
asks for functions, the bridge runs them through the service, and Pipecat's function call
observer reports how each one went."""

import asyncio
import json
import socket
import threading

import pytest
from pipecat.frames.frames import LLMMessagesAppendFrame
from pipecat.observers.function_call_observer import FunctionCallEventKind, FunctionCallObserver
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.tests.utils import SleepFrame, run_test

from tests.bridge.scripted import ScriptedLLM
from tests.bridge.stack import PARAMETERS, set_up_line
from tests.conftest import RUNTIME_TOKEN
from voiceagent_bridge.bridge import CallBridge
from voiceagent_bridge.client import (
    FUNCTION_ANSWER_MARGIN_S,
    FUNCTION_NETWORK_MARGIN_S,
    Call,
    FunctionSpec,
    RuntimeClient,
    Session,
)

pytestmark = pytest.mark.slow


def says(text: str) -> LLMMessagesAppendFrame:
    return LLMMessagesAppendFrame(messages=[{"role": "user", "content": text}], run_llm=True)


async def run_bridge(bridge: CallBridge, frames: list) -> tuple[list, list]:
    """The scripted LLM between the context aggregators, with the bridge's functions; the
    LLM context's messages and the function call events Pipecat observed."""
    llm = ScriptedLLM(system_instruction=bridge.system_prompt)
    bridge.register_functions(llm)
    context = bridge.context()
    user, assistant = LLMContextAggregatorPair(context)
    observer = FunctionCallObserver(include_results=True)
    events = []

    @observer.event_handler("on_function_call_event")
    async def on_event(_observer, event):
        events.append(event)

    await run_test(Pipeline([user, llm, assistant]), frames_to_send=frames, observers=[observer])
    return context.get_messages(), events


def test_a_function_call_goes_through_the_service_and_its_answer_into_the_context(service):
    line = set_up_line(
        service.base_url,
        name="context",
        did="+6221555301",
        agent={"name": "Context", "systemPrompt": "Be brief."},
        functions=[
            {
                "name": "lookup_order",
                "description": "Look up an order.",
                "endpoint": service.endpoint.url + "/orders",
                "parameters": PARAMETERS,
            }
        ],
    )

    async def call():
        async with RuntimeClient(service.base_url, RUNTIME_TOKEN) as client:
            started = await client.start_call(did=line.did, caller_number="+6281200000301")
            bridge = CallBridge(client, started.call, started.session)
            frames = [says('call lookup_order {"orderId": "A-5"}'), SleepFrame(1.5)]
            return started.call.id, *await run_bridge(bridge, frames)

    call_id, messages, events = asyncio.run(call())
    answer = {"orderId": "A-5", "status": "shipped"}
    tool = next(m for m in messages if m.get("role") == "tool")
    assert json.loads(tool["content"]) == answer
    assert messages[-1] == {
        "role": "assistant",
        "content": f"The function answered: {json.dumps(answer)}",
    }
    assert [e.kind for e in events] == [
        FunctionCallEventKind.STARTED,
        FunctionCallEventKind.IN_PROGRESS,
        FunctionCallEventKind.COMPLETED,
    ]
    (request,) = [r for r in service.endpoint.requests if r.json()["callId"] == call_id]
    assert request.json()["parameters"] == {"orderId": "A-5"}


class Silent:
    """A real TCP server that takes requests and never answers them."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.connections.append(connection)

    def close(self) -> None:
        self.server.close()
        for connection in self.connections:
            connection.close()


def spec(name: str, timeout_ms: int) -> FunctionSpec:
    return FunctionSpec(name, "Waits.", {"type": "object", "properties": {}}, timeout_ms)


def test_each_function_keeps_the_timeout_its_session_gives_it(service):
    """The session the service hands out carries each function's timeoutMs, and the bridge
    holds each call of it to that budget: against a service that then stops answering,
    each one is answered service_unavailable at its own deadline."""
    functions = [
        {
            "name": name,
            "description": "Waits.",
            "endpoint": service.endpoint.url + "/orders",
            "parameters": {"type": "object", "properties": {}},
            "timeoutMs": timeout_ms,
        }
        for name, timeout_ms in (("quick", 500), ("patient", 1500))
    ]
    line = set_up_line(
        service.base_url,
        name="budgets",
        did="+6221555302",
        agent={"name": "Budgets", "systemPrompt": "Be brief."},
        functions=functions,
    )
    silent = Silent()

    async def call():
        async with RuntimeClient(service.base_url, RUNTIME_TOKEN) as client:
            started = await client.start_call(did=line.did, caller_number="+6281200000302")
        async with RuntimeClient(silent.url, RUNTIME_TOKEN) as client:
            frames = [
                says("call quick {}"),
                SleepFrame(2.0),
                says("call patient {}"),
                SleepFrame(3),
            ]
            bridge = CallBridge(client, started.call, started.session)
            return started.session, *await run_bridge(bridge, frames)

    try:
        session, _, events = asyncio.run(call())
    finally:
        silent.close()
    assert session.agent_version == 3  # created, then one version per function
    assert {spec.name: spec.timeout_ms for spec in session.functions} == {
        "quick": 500,
        "patient": 1500,
    }
    opening = (FunctionCallEventKind.STARTED, FunctionCallEventKind.IN_PROGRESS)
    settled = {event.function_name: event for event in events if event.kind not in opening}
    for name, timeout_ms in (("quick", 500), ("patient", 1500)):
        event = settled[name]
        budget = timeout_ms / 1000 + FUNCTION_ANSWER_MARGIN_S + FUNCTION_NETWORK_MARGIN_S
        assert event.result["error"]["code"] == "service_unavailable"
        assert budget - 0.1 <= event.timestamp - event.in_progress_at < budget + 0.5, name


def test_each_function_keeps_its_own_deadline_when_the_service_does_not_answer():
    """A service that takes the request and says nothing: each function's call is answered
    service_unavailable once its own budget (timeoutMs, the service's margin and the
    network's) is spent, and Pipecat's deadline, set later, never has to cut it off."""
    session = Session(
        agent_id="agent_x",
        system_prompt="Be brief.",
        voice_id="Puck",
        greeting_text="",
        language="id",
        escalation_number=None,
        tools_enabled=(),
        functions=(spec("quick", 500), spec("patient", 1500)),
        max_call_duration_seconds=60,
    )
    silent = Silent()

    async def call():
        async with RuntimeClient(silent.url, RUNTIME_TOKEN) as client:
            call = Call.from_json({"id": "call_x", "status": "answered"})
            frames = [
                says("call quick {}"),
                SleepFrame(2.0),
                says("call patient {}"),
                SleepFrame(3),
            ]
            return await run_bridge(CallBridge(client, call, session), frames)

    try:
        _, events = asyncio.run(call())
    finally:
        silent.close()
    opening = (FunctionCallEventKind.STARTED, FunctionCallEventKind.IN_PROGRESS)
    settled = {event.function_name: event for event in events if event.kind not in opening}
    for name, timeout_ms in (("quick", 500), ("patient", 1500)):
        event = settled[name]
        budget = timeout_ms / 1000 + FUNCTION_ANSWER_MARGIN_S + FUNCTION_NETWORK_MARGIN_S
        assert event.kind == FunctionCallEventKind.COMPLETED
        assert event.result == {
            "error": {
                "code": "service_unavailable",
                "message": "The function could not be run just now.",
            }
        }
        # The observer notes each moment as it sees the frame, a little after it happened.
        assert budget - 0.1 <= event.timestamp - event.in_progress_at < budget + 0.5, name
