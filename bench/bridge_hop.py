"""Bridge hop: a function call the LLM makes through the Pipecat bridge, against the same call
posted to the service directly.

Through the bridge: a scripted LLM (tests/bridge/scripted.py) asks for the function in a
Pipecat pipeline (user and assistant context aggregators around it), the CallBridge handler
sends it with RuntimeClient (aiohttp) to gunicorn, a real `python worker.py functions` and
Redis call the local endpoint, and the answer is handed back to the LLM; timed from the frame
that starts the call to the one that carries its result, both as they reach the processor
after the LLM. Directly: the same POST /internal/v1/calls/:id/function-calls with a pooled
aiohttp session, in the same event loop. Alternating batches in the same run; the bridge adds
the difference (Pipecat's function call machinery, the handler and the client).
"""

import asyncio
import os
import statistics
import sys
import time

import aiohttp
from _harness import (
    RUNTIME_TOKEN,
    fresh_redis,
    gunicorn,
    percentile,
    print_table,
    receiver,
    service_env,
    temp_sqlite_url,
    worker,
)
from seed import seed_tenant

INVOCATIONS = int(os.environ.get("INVOCATIONS", 500))
BATCH = 50
ARGUMENTS = '{"order": "A-1"}'


DID = "+6221000001"


def seed(database_url: str, endpoint: str) -> None:
    """A tenant whose number DID is answered by an agent with a function `lookup` at
    endpoint."""
    from app import create_app, db
    from app.services import billing, functions
    from app.services import tenants as tenant_service
    from app.services.audit import Actor

    app = create_app({"DATABASE_URL": database_url, "REDIS_URL": None, "QUEUE_MODE": "inline"})
    app.config["ALLOW_PRIVATE_URLS"] = True
    with app.app_context():
        db.upgrade()
        seeded = seed_tenant(name="bench", calls=0, agents=1)
        tenant = tenant_service.find_tenant(seeded.tenant_id)
        billing.grant(actor=Actor.system(), tenant=tenant, minutes=10**6)
        functions.create_function(
            actor=Actor.system(),
            tenant=tenant,
            agent_id=seeded.agent_ids[0],
            name="lookup",
            description="Look an order up.",
            endpoint=endpoint + "/lookup",
            method="POST",
            parameters={
                "type": "object",
                "properties": {"order": {"type": "string", "description": "Order number."}},
                "required": ["order"],
            },
        )
        db.close_all()


async def measure(base_url: str) -> tuple[list[float], list[float]]:
    """INVOCATIONS calls through the bridge and as many direct posts, in alternating
    batches; seconds each."""
    from loguru import logger
    from pipecat.frames.frames import (
        EndFrame,
        FunctionCallResultFrame,
        FunctionCallsStartedFrame,
        LLMMessagesUpdateFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineWorker
    from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.workers.runner import WorkerRunner

    from tests.bridge.scripted import ScriptedLLM
    from voiceagent_bridge.bridge import CallBridge
    from voiceagent_bridge.client import RuntimeClient

    logger.remove()  # Pipecat logs every function call at DEBUG; a deployment runs at INFO
    logger.add(sys.stderr, level="INFO")
    hops: list[float] = []
    direct: list[float] = []
    async with RuntimeClient(base_url, RUNTIME_TOKEN) as client:
        started_call = await client.start_call(did=DID, caller_number="+628123456789")
        call_id = started_call.call.id
        await client.answer_call(call_id)
        body = {"functionName": "lookup", "parameters": {"order": "A-1"}}
        bridge = CallBridge(client, started_call.call, started_call.session)
        llm = ScriptedLLM()
        bridge.register_functions(llm)
        user, assistant = LLMContextAggregatorPair(bridge.context())
        settled: asyncio.Queue[float] = asyncio.Queue()

        class Stopwatch(FrameProcessor):
            """Times each function call from its start to its result as they pass."""

            started = 0.0

            async def process_frame(self, frame, direction) -> None:
                await super().process_frame(frame, direction)
                if direction == FrameDirection.DOWNSTREAM:
                    if isinstance(frame, FunctionCallsStartedFrame):
                        self.started = time.perf_counter()
                    elif isinstance(frame, FunctionCallResultFrame):
                        settled.put_nowait(time.perf_counter() - self.started)
                await self.push_frame(frame, direction)

        replied: asyncio.Queue[str] = asyncio.Queue()

        @assistant.event_handler("on_assistant_turn_stopped")
        async def on_reply(_aggregator, message) -> None:
            if message.content:
                replied.put_nowait(message.content)

        async def through_the_bridge() -> float:
            """One call the LLM asks for; its time from start to result. The LLM's answer
            to the result is awaited too, before the next call."""
            await pipeline_worker.queue_frame(LLMMessagesUpdateFrame([ask], run_llm=True))
            seconds = await settled.get()
            await replied.get()
            return seconds

        pipeline_worker = PipelineWorker(
            Pipeline([user, llm, Stopwatch(), assistant]),
            idle_timeout_secs=None,
            enable_rtvi=False,
        )
        running = asyncio.Event()

        @pipeline_worker.event_handler("on_pipeline_started")
        async def on_started(_worker, _frame) -> None:
            running.set()

        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(pipeline_worker)
        run = asyncio.create_task(runner.run())
        await running.wait()
        url = f"{base_url}/internal/v1/calls/{call_id}/function-calls"
        headers = {"Authorization": f"Bearer {RUNTIME_TOKEN}"}
        # A fresh context each time: the LLM sees only the request.
        ask = {"role": "user", "content": f"call lookup {ARGUMENTS}"}
        async with aiohttp.ClientSession() as http:

            async def post() -> None:
                async with http.post(url, json=body, headers=headers) as response:
                    answer = await response.json()
                    if "result" not in answer:
                        raise RuntimeError(f"function call failed: {answer}")

            for _ in range(3):  # warm both paths
                await post()
                await through_the_bridge()
            for _ in range(INVOCATIONS // BATCH):
                for _ in range(BATCH):
                    hops.append(await through_the_bridge())
                for _ in range(BATCH):
                    began = time.perf_counter()
                    await post()
                    direct.append(time.perf_counter() - began)
        await pipeline_worker.queue_frame(EndFrame())
        await run
    return hops, direct


def main() -> None:
    fresh_redis()
    database_url = temp_sqlite_url()
    with receiver() as endpoint:
        seed(database_url, endpoint)
        env = service_env(database_url)
        with gunicorn("wsgi:app", env) as port, worker(env, "functions"):
            hops, direct = asyncio.run(measure(f"http://127.0.0.1:{port}"))
    ms = {
        name: (statistics.median(values) * 1000, percentile(values, 0.99) * 1000)
        for name, values in (("bridge", hops), ("direct", direct))
    }
    print_table(
        f"Function call: {INVOCATIONS} through the Pipecat bridge (scripted LLM, CallBridge, "
        f"RuntimeClient) vs {INVOCATIONS} direct posts (aiohttp), alternating batches of "
        f"{BATCH}; gunicorn + worker.py functions + Redis + a local endpoint behind both",
        ["", "direct", "bridge", "added by the bridge"],
        [
            [
                label,
                f"{ms['direct'][i]:.2f} ms",
                f"{ms['bridge'][i]:.2f} ms",
                f"{ms['bridge'][i] - ms['direct'][i]:+.2f} ms",
            ]
            for i, label in enumerate(("p50", "p99"))
        ],
    )


if __name__ == "__main__":
    main()
