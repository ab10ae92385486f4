"""The Pipecat bridge: runs one call of the service's agent in a Pipecat pipeline.

Given the call and its session (from `RuntimeClient.start_call` or `dispatch`), a `CallBridge`
gives the LLM its system prompt and the agent's functions, each with its own timeout, and
sends every function call the LLM makes through the service; it speaks the greeting first,
hangs up at the call's time limit, and reports the call as it goes: answered, each turn of
the transcript, and the end with talk time and what the usage metrics cost.

Reports go through a `Reporter`: in order, one at a time, held and repeated while the
service cannot be reached, so a call whose service goes away keeps talking and is reported
in full once the service answers again. Fields of the runtime API that a service does not
take yet (it answers 422 "Unknown field.") are remembered in `ServiceFeatures` and left out
from then on: transcript turns are then kept for the summary, the cost breakdown and the
recording URL go into the call's metadata.
"""

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    EndFrame,
    Frame,
    LLMMessagesAppendFrame,
    LLMRunFrame,
    TTSSpeakFrame,
)
from pipecat.observers.base_observer import BaseObserver
from pipecat.observers.service_metrics_observer import (
    ServiceMetricsObserver,
    ServiceUsageKind,
    ServiceUsageRecord,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext, LLMContextMessage
from pipecat.processors.aggregators.llm_response_universal import (
    AssistantTurnStoppedMessage,
    LLMAssistantAggregator,
    LLMContextAggregatorPair,
    LLMUserAggregator,
    LLMUserAggregatorParams,
    UserTurnMessageAddedMessage,
)
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.services.llm_service import FunctionCallParams, LLMService
from pipecat.transports.base_transport import BaseTransport

from voiceagent_bridge.client import (
    FUNCTION_NETWORK_MARGIN_S,
    Call,
    CostBreakdown,
    EndStatus,
    FunctionOutcome,
    Role,
    RuntimeAPIError,
    RuntimeClient,
    ServiceUnavailable,
    Session,
    Turn,
    ValidationFailed,
)

log = logging.getLogger(__name__)

# Pipecat cancels a function call this long after the client's own wait for the service's
# answer is over: the handler always hands the LLM an answer (the service's, or its own
# service_unavailable) before Pipecat's deadline, which is only the last resort.
PIPECAT_TIMEOUT_MARGIN_S = 0.5
MAX_TURNS_PER_POST = 100
MAX_PENDING_TURNS = 2000  # the service keeps at most this many turns of a call
MAX_SUMMARY_CHARS = 100_000
HANGUP_GRACE_S = 15.0  # a goodbye still being spoken after this much is cut off


# -- what the service takes ---------------------------------------------------------------------


@dataclass
class ServiceFeatures:
    """The optional runtime API fields the service turned down as unknown, shared by every
    call of a process (a newer service takes them: the process learns that when restarted)."""

    refused: set[str] = field(default_factory=set)

    def takes(self, name: str) -> bool:
        return name not in self.refused

    def learn(self, error: ValidationFailed, optional: Sequence[str]) -> bool:
        """Record the optional fields error names as unknown; whether it named only those."""
        unknown = error.unknown_fields
        if not unknown or not unknown <= set(optional):
            return False
        log.info("the service does not take %s: leaving them out", ", ".join(sorted(unknown)))
        self.refused |= unknown
        return True


# -- usage and its cost -------------------------------------------------------------------------


@dataclass(frozen=True)
class Prices:
    """What the providers charge, in IDR, to turn the call's usage into its costBreakdown."""

    llm_input_per_million_tokens: float = 0.0
    llm_output_per_million_tokens: float = 0.0
    stt_per_minute: float = 0.0
    tts_per_million_characters: float = 0.0
    telephony_per_minute: float = 0.0  # charged per started minute of the call
    # Speech-to-speech models price audio tokens apart (None: as text tokens).
    llm_input_audio_per_million_tokens: float | None = None
    llm_output_audio_per_million_tokens: float | None = None
    # Meta bills a business-initiated WhatsApp call per started 6-second pulse of its talk.
    whatsapp_per_pulse: float = 0.0


@dataclass
class Usage:
    """What the call's services reported consuming (Pipecat's usage metrics)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    stt_seconds: float = 0.0
    tts_characters: int = 0
    input_audio_tokens: int = 0  # of prompt_tokens
    output_audio_tokens: int = 0  # of completion_tokens

    def add(self, record: ServiceUsageRecord) -> None:
        if record.kind == ServiceUsageKind.LLM:
            self.prompt_tokens += record.prompt_tokens or 0
            self.completion_tokens += record.completion_tokens or 0
            self.input_audio_tokens += record.input_audio_tokens or 0
            self.output_audio_tokens += record.output_audio_tokens or 0
        elif record.kind == ServiceUsageKind.STT:
            self.stt_seconds += record.audio_seconds or 0.0
        elif record.kind == ServiceUsageKind.TTS:
            self.tts_characters += record.characters or 0

    def to_json(self) -> dict[str, Any]:
        return {
            "llm": {
                "promptTokens": self.prompt_tokens,
                "completionTokens": self.completion_tokens,
                "inputAudioTokens": self.input_audio_tokens,
                "outputAudioTokens": self.output_audio_tokens,
            },
            "stt": {"audioSeconds": round(self.stt_seconds, 1)},
            "tts": {"characters": self.tts_characters},
        }

    def llm_cost(self, prices: Prices) -> float:
        """The LLM's tokens at their prices: audio tokens at the audio prices where given."""
        audio_in = prices.llm_input_audio_per_million_tokens
        audio_out = prices.llm_output_audio_per_million_tokens
        text_in = self.prompt_tokens - (self.input_audio_tokens if audio_in is not None else 0)
        text_out = self.completion_tokens - (
            self.output_audio_tokens if audio_out is not None else 0
        )
        return (
            text_in * prices.llm_input_per_million_tokens
            + text_out * prices.llm_output_per_million_tokens
            + self.input_audio_tokens * (audio_in or 0.0)
            + self.output_audio_tokens * (audio_out or 0.0)
        ) / 1e6

    def cost(
        self, prices: Prices, duration_seconds: float, telephony: float | None = None
    ) -> CostBreakdown:
        """The breakdown of these usages at prices; telephony, when given, is the call's
        telephony cost (else the started minutes of duration_seconds at their price)."""
        if telephony is None:
            telephony = math.ceil(duration_seconds / 60) * prices.telephony_per_minute
        return CostBreakdown(
            llm=round(self.llm_cost(prices)),
            stt=round(self.stt_seconds / 60 * prices.stt_per_minute),
            tts=round(self.tts_characters * prices.tts_per_million_characters / 1e6),
            telephony=round(telephony),
        )


# -- the reports --------------------------------------------------------------------------------


@dataclass(frozen=True)
class EndReport:
    status: EndStatus
    duration_seconds: int
    talk_time_seconds: int
    hangup_reason: str
    hangup_initiator: str
    ended_at: datetime
    cost_breakdown: CostBreakdown | None = None
    recording_url: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


class Reporter:
    """Sends one call's reports to the service in order: answered, turns, summary, end.

    Nothing here ever waits on the service in the call's path: reports are queued and one
    task sends them. While the service cannot be reached each report is tried again, every
    retry_s to max_retry_s, until give_up_s after the call ended; a report the service
    refuses is logged and dropped. Pending turns are bounded (MAX_PENDING_TURNS) and go out
    together once the service answers again.
    """

    def __init__(
        self,
        client: RuntimeClient,
        call_id: str,
        features: ServiceFeatures,
        *,
        retry_s: float = 0.25,
        max_retry_s: float = 5.0,
        give_up_s: float = 900.0,
    ) -> None:
        self.client = client
        self.call_id = call_id
        self.features = features
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s
        self.give_up_s = give_up_s
        self.answered_at: datetime | None = None
        self.turns: list[Turn] = []
        self.dropped_turns = 0
        self.summary: str | None = None
        self.end: EndReport | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing_at: float | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"reports {self.call_id}")

    def answered(self, at: datetime) -> None:
        self.answered_at = at
        self._wake.set()

    def turn(self, turn: Turn) -> None:
        if not self.features.takes("turns"):
            return
        if len(self.turns) >= MAX_PENDING_TURNS:
            if not self.dropped_turns:
                log.warning(
                    "call %s: too many turns waiting; the summary keeps the rest", self.call_id
                )
            self.dropped_turns += 1
            return
        self.turns.append(turn)
        self._wake.set()

    def finish(self, end: EndReport, summary: str | None) -> None:
        self.summary = summary
        self.end = end
        self._closing_at = time.monotonic()
        self._wake.set()

    async def wait(self) -> bool:
        """Wait until every report went out or was given up; whether all went out."""
        self.start()
        assert self._task is not None
        await asyncio.shield(self._task)
        return self.end is None and not self.turns and self.summary is None

    @property
    def pending(self) -> bool:
        return bool(self.answered_at or self.turns or self.summary is not None or self.end)

    async def _run(self) -> None:
        delay = self.retry_s
        while True:
            if not self.pending:
                if self._closing_at is not None:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                await self._send_next()
                delay = self.retry_s
            except ServiceUnavailable as exc:
                if (
                    self._closing_at is not None
                    and time.monotonic() - self._closing_at > self.give_up_s
                ):
                    log.error("call %s: giving up its reports: %s", self.call_id, exc)
                    return
                log.warning("call %s: %s; trying again in %.2f s", self.call_id, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_retry_s)

    async def _send_next(self) -> None:
        """Send the first pending report; drop it when the service refuses it."""
        try:
            if self.answered_at is not None:
                await self.client.answer_call(self.call_id, answered_at=self.answered_at)
                self.answered_at = None
            elif self.turns and self.features.takes("turns"):
                batch = self.turns[:MAX_TURNS_PER_POST]
                await self.client.add_transcript(self.call_id, turns=batch)
                del self.turns[: len(batch)]
            elif self.turns:
                self.turns.clear()  # the service takes no turns: the summary has them
            elif self.summary is not None:
                await self.client.add_transcript(self.call_id, summary=self.summary)
                self.summary = None
            elif self.end is not None:
                await self._send_end(self.end)
                self.end = None
        except ServiceUnavailable:
            raise
        except ValidationFailed as exc:
            if self.features.learn(exc, ("turns", "costBreakdown", "recordingUrl")):
                return  # the same report goes again, without what the service does not take
            self._drop(exc)
        except RuntimeAPIError as exc:
            self._drop(exc)

    async def _send_end(self, end: EndReport) -> None:
        metadata = dict(end.metadata)
        breakdown, recording = end.cost_breakdown, end.recording_url
        if breakdown is not None and not self.features.takes("costBreakdown"):
            metadata["costBreakdown"] = breakdown.to_json()
            total, breakdown = breakdown.total, None
        else:
            total = breakdown.total if breakdown else 0
        if recording is not None and not self.features.takes("recordingUrl"):
            metadata["recordingUrl"], recording = recording, None
        await self.client.end_call(
            self.call_id,
            status=end.status,
            duration_seconds=end.duration_seconds,
            talk_time_seconds=end.talk_time_seconds,
            hangup_reason=end.hangup_reason,
            hangup_initiator=end.hangup_initiator,
            ai_cost_idr=total,
            cost_breakdown=breakdown,
            recording_url=recording,
            ended_at=end.ended_at,
            metadata=metadata,
        )

    def _drop(self, error: RuntimeAPIError) -> None:
        """The service refused the first pending report: log it and go on with the rest."""
        if self.answered_at is not None:
            what, self.answered_at = "answered", None
        elif self.turns:
            what = "turns"
            del self.turns[:MAX_TURNS_PER_POST]
        elif self.summary is not None:
            what, self.summary = "summary", None
        else:
            what, self.end = "ended", None
        log.error("call %s: the service refused %s: %s", self.call_id, what, error)


# -- the bridge ---------------------------------------------------------------------------------


def transcript_text(turns: Sequence[Turn]) -> str:
    """The turns as "caller: …" and "agent: …" lines: the default transcript summary."""
    return "\n".join(f"{turn.role}: {turn.text}" for turn in turns)[:MAX_SUMMARY_CHARS]


@dataclass(frozen=True)
class BridgeOptions:
    """How the runtime runs its calls, beyond what the session says.

    max_call_seconds caps every call below the session's maxCallDurationSeconds (None: the
    session's alone); goodbye_text is spoken before hanging up at the limit; prices turn
    the usage metrics into the costBreakdown; summarize makes the transcriptSummary from
    the turns (default: the turns as lines); report_give_up_s is how long reports are tried
    again after the call ended while the service cannot be reached.
    """

    max_call_seconds: float | None = None
    goodbye_text: str | None = None
    prices: Prices | None = None
    summarize: Callable[[Sequence[Turn]], Awaitable[str]] | None = None
    report_give_up_s: float = 900.0


@dataclass
class VoiceServices:
    """The speech and language services of one call, and how the caller's turns are told.

    The LLM is built with the session's system prompt as its system instruction (the way
    Pipecat's services take one), as a services factory does with `session.system_prompt`.
    """

    stt: FrameProcessor
    llm: LLMService[Any]
    tts: FrameProcessor
    user_params: LLMUserAggregatorParams | None = None


@dataclass
class RealtimeServices:
    """A speech-to-speech service (Gemini Live, say) that hears the caller and speaks itself.

    Built with the session's system prompt as its system instruction and the session's
    functions as its tools (`session_tools`): the bridge's context then carries neither, so
    the service's session starts as it was built. The caller's and the agent's turns come
    from the service's own transcriptions.
    """

    llm: LLMService[Any]
    user_params: LLMUserAggregatorParams | None = None


def session_tools(session: Session) -> ToolsSchema | None:
    """The agent's functions as the LLM is told of them (None when it has none)."""
    if not session.functions:
        return None
    return ToolsSchema(
        standard_tools=[
            FunctionSchema(
                name=spec.name,
                description=spec.description,
                properties=dict(spec.parameters.get("properties") or {}),
                required=list(spec.parameters.get("required") or []),
            )
            for spec in session.functions
        ]
    )


def say_exactly(text: str) -> LLMContextMessage:
    """The message that has a speech-to-speech model say text, and nothing else."""
    return cast(
        LLMContextMessage,
        {"role": "user", "content": f'Say exactly this, word for word, and nothing else: "{text}"'},
    )


class CallBridge:
    """One call of the service's agent in a Pipecat pipeline.

    Either build the standard pipeline with `build_worker(transport, services)`, or wire
    your own: `context()` for the LLM context aggregators, `register_functions(llm)`,
    `attach(worker, user_aggregator, assistant_aggregator)` and `observers()` for the worker;
    then `answered()` when the caller is connected, `caller_hung_up()` when they leave,
    and `finish()` once the pipeline has ended. on_turn, when given, is told of each turn of
    the transcript as it is added (for a page that shows the conversation, say).
    """

    def __init__(
        self,
        client: RuntimeClient,
        call: Call,
        session: Session,
        *,
        options: BridgeOptions | None = None,
        features: ServiceFeatures | None = None,
        started: float | None = None,
        on_turn: Callable[[Turn], None] | None = None,
    ) -> None:
        self.client = client
        self.call = call
        self.session = session
        self.options = options or BridgeOptions()
        self.features = features or ServiceFeatures()
        self.started = started if started is not None else time.monotonic()
        self.reporter = Reporter(
            client, call.id, self.features, give_up_s=self.options.report_give_up_s
        )
        self.turns: list[Turn] = []
        self.on_turn = on_turn
        self.usage = Usage()
        self.worker: PipelineWorker | None = None
        self.answered_mono: float | None = None
        self.answered_wall: datetime | None = None
        self.ended_mono: float | None = None
        self.ended_wall: datetime | None = None
        self.hangup: tuple[str, str] | None = None  # (reason, initiator), the first one set
        self._limit_task: asyncio.Task[None] | None = None
        self._cut_off_task: asyncio.Task[None] | None = None
        self.realtime = False  # a speech-to-speech service speaks: no TTS to give text to
        self._agent_spoke = asyncio.Event()
        self._user_aggregator: LLMUserAggregator | None = None

    # -- configuration --------------------------------------------------------------------------

    @property
    def system_prompt(self) -> str:
        """The agent's instructions for the LLM (the service filled in the variables)."""
        return self.session.system_prompt

    @property
    def call_limit_s(self) -> float:
        """Seconds of conversation after which the call is ended."""
        limit = float(self.session.max_call_duration_seconds)
        if self.options.max_call_seconds is not None:
            limit = min(limit, self.options.max_call_seconds)
        return limit

    def tools(self) -> ToolsSchema | None:
        """The agent's functions as the LLM is told of them (None when it has none)."""
        return session_tools(self.session)

    def context(self) -> LLMContext:
        """A fresh LLM context with the agent's functions as its tools."""
        tools = self.tools()
        return LLMContext(tools=tools) if tools is not None else LLMContext()

    def register_functions(self, llm: LLMService[Any]) -> None:
        """Route each of the agent's functions through the service, with its own deadline."""
        for spec in self.session.functions:
            llm.register_function(
                spec.name,
                self._run_function,
                timeout_secs=spec.answer_within_s
                + FUNCTION_NETWORK_MARGIN_S
                + PIPECAT_TIMEOUT_MARGIN_S,
            )

    def observers(self) -> list[BaseObserver]:
        """Observers for the worker: the usage metrics that make the cost breakdown."""
        observer = ServiceMetricsObserver()

        @observer.event_handler("on_service_usage")
        async def on_service_usage(_observer: Any, record: ServiceUsageRecord) -> None:
            self.usage.add(record)

        return [observer]

    def attach(
        self,
        worker: PipelineWorker,
        user_aggregator: LLMUserAggregator,
        assistant_aggregator: LLMAssistantAggregator,
    ) -> None:
        """Take the transcript from the aggregators, and the worker to speak and hang up."""
        self.worker = worker
        self._user_aggregator = user_aggregator

        @user_aggregator.event_handler("on_user_turn_message_added")
        async def on_user_turn(_aggregator: Any, message: UserTurnMessageAddedMessage) -> None:
            self._add_turn("caller", message.content, message.timestamp)

        @assistant_aggregator.event_handler("on_assistant_turn_stopped")
        async def on_agent_turn(_aggregator: Any, message: AssistantTurnStoppedMessage) -> None:
            self._add_turn("agent", message.content, message.timestamp)
            self._agent_spoke.set()

    def build_worker(
        self,
        transport: BaseTransport,
        services: VoiceServices | RealtimeServices,
        *,
        params: PipelineParams | None = None,
        idle_timeout_secs: float | None = None,
    ) -> PipelineWorker:
        """The usual voice pipeline (transport in, STT, user turns, LLM, TTS, transport out,
        agent turns) as a worker, with this call's functions, transcript and metrics; with
        a speech-to-speech service, that service in place of STT, LLM and TTS."""
        self.register_functions(services.llm)
        processors: list[FrameProcessor]
        if isinstance(services, RealtimeServices):
            self.realtime = True
            # The service was built with the prompt and the tools; the greeting is the
            # context's first message, said when the caller is connected (answered()).
            greeting = self.session.greeting_text
            context = LLMContext(messages=[say_exactly(greeting)] if greeting else None)
            user_aggregator, assistant_aggregator = LLMContextAggregatorPair(
                context, user_params=services.user_params or LLMUserAggregatorParams()
            )
            processors = [
                transport.input(),
                user_aggregator,
                services.llm,
                transport.output(),
                assistant_aggregator,
            ]
        else:
            user_aggregator, assistant_aggregator = LLMContextAggregatorPair(
                self.context(), user_params=services.user_params or LLMUserAggregatorParams()
            )
            processors = [
                transport.input(),
                services.stt,
                user_aggregator,
                services.llm,
                services.tts,
                transport.output(),
                assistant_aggregator,
            ]
        pipeline = Pipeline(processors)
        worker = PipelineWorker(
            pipeline,
            params=params or PipelineParams(enable_metrics=True, enable_usage_metrics=True),
            observers=self.observers(),
            idle_timeout_secs=idle_timeout_secs,
            enable_rtvi=False,
        )
        self.attach(worker, user_aggregator, assistant_aggregator)
        return worker

    # -- the call -------------------------------------------------------------------------------

    async def answered(self) -> None:
        """The caller is connected: report it, speak the greeting, start the call's clock."""
        self.answered_mono = time.monotonic()
        self.answered_wall = datetime.now(UTC)
        self.reporter.answered(self.answered_wall)
        self.reporter.start()
        if self.realtime and self.worker is not None:
            # The speech-to-speech service answers its context: the greeting first.
            await self.worker.queue_frame(LLMRunFrame())
        elif self.session.greeting_text and self.worker is not None:
            await self.worker.queue_frame(TTSSpeakFrame(self.session.greeting_text))
        self._limit_task = asyncio.create_task(self._end_at_limit(), name=f"limit {self.call.id}")

    async def caller_hung_up(self) -> None:
        """The caller left (the media stream closed)."""
        self._mark_end("normal", "caller")

    def end_now(self, reason: str, *, initiator: str) -> None:
        """Note that the call is over, for a reason of this side's (the pipeline failed, say)."""
        self._mark_end(reason, initiator)

    async def hang_up(self, reason: str, *, initiator: str = "agent") -> None:
        """End the call from this side: the goodbye when there is one, then the end."""
        self._mark_end(reason, initiator)
        if self.worker is None:
            return
        self._cut_off_task = asyncio.create_task(self._cut_off(), name=f"cut off {self.call.id}")
        if self.realtime:
            # The service says the goodbye as a turn of its own: the end waits for it.
            if self.options.goodbye_text:
                self._agent_spoke.clear()
                # Appended right before the service, which takes it in; the assistant's
                # aggregator then asks the service to answer it.
                assert self._user_aggregator is not None
                await self._user_aggregator.push_frame(
                    LLMMessagesAppendFrame([say_exactly(self.options.goodbye_text)], run_llm=True)
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._agent_spoke.wait(), HANGUP_GRACE_S)
            await self.worker.queue_frame(EndFrame())
            return
        frames: list[Frame] = []
        if self.options.goodbye_text:
            frames.append(TTSSpeakFrame(self.options.goodbye_text))
        frames.append(EndFrame())
        await self.worker.queue_frames(frames)

    async def _cut_off(self) -> None:
        """End the pipeline if the goodbye and the end are still under way after the grace."""
        await asyncio.sleep(HANGUP_GRACE_S)
        if self.worker is not None and not self.worker.has_finished():
            await self.worker.cancel(reason="the goodbye took too long")

    async def _end_at_limit(self) -> None:
        await asyncio.sleep(self.call_limit_s)
        log.info("call %s reached its limit of %.0f s", self.call.id, self.call_limit_s)
        await self.hang_up("max_duration", initiator="system")

    def _mark_end(self, reason: str, initiator: str) -> None:
        if self.hangup is None:
            self.hangup = (reason, initiator)
            self.ended_mono = time.monotonic()
            self.ended_wall = datetime.now(UTC)

    def _add_turn(self, role: Role, text: str | None, timestamp: str | None) -> None:
        text = (text or "").strip()
        if not text:
            return
        turn = Turn(role, text, *self._turn_times(timestamp))
        self.turns.append(turn)
        self.reporter.turn(turn)
        if self.on_turn is not None:
            self.on_turn(turn)

    def _turn_times(self, timestamp: str | None) -> tuple[int | None, int | None]:
        """startMs and endMs of a turn that began at timestamp and ends now, from the answer."""
        if self.answered_wall is None:
            return None, None
        now = datetime.now(UTC)
        try:
            began = datetime.fromisoformat(timestamp) if timestamp else now
        except ValueError:
            began = now
        if began.tzinfo is None:
            began = began.replace(tzinfo=UTC)

        def since_answer(moment: datetime) -> int:
            assert self.answered_wall is not None
            return max(0, int((moment - self.answered_wall).total_seconds() * 1000))

        return since_answer(began), since_answer(now)

    async def _run_function(self, params: FunctionCallParams) -> None:
        """The LLM's function call, run by the service; its answer goes back to the LLM."""
        spec = self.session.function(params.function_name)
        try:
            outcome = await self.client.invoke_function(
                self.call.id,
                params.function_name,
                dict(params.arguments),
                **({"timeout_ms": spec.timeout_ms} if spec else {}),
            )
        except ServiceUnavailable as exc:
            log.warning("call %s: function %s: %s", self.call.id, params.function_name, exc)
            outcome = FunctionOutcome.failure(
                "service_unavailable", "The function could not be run just now."
            )
        except RuntimeAPIError as exc:
            outcome = FunctionOutcome.failure(exc.code, exc.message)
        await params.result_callback(outcome.for_llm())

    async def finish(
        self,
        *,
        recording_url: str | None = None,
        metadata: dict[str, Any] | None = None,
        talk_time_seconds: float | None = None,
        telephony_cost: float | None = None,
        status: EndStatus | None = None,
    ) -> bool:
        """After the pipeline ended: report the end (talk time, cost) and the summary, and
        wait until the reports went out or were given up; whether they all went out.

        talk_time_seconds, when the provider told it, is the call's talk time (else the time
        since answered()); telephony_cost, when given, is its telephony cost (else the
        started minutes at Prices' telephony_per_minute); status, when given, the end's
        status (else ended once answered, failed before)."""
        for task in (self._limit_task, self._cut_off_task):
            if task is not None:
                task.cancel()
        self._mark_end("normal", "caller")
        assert self.hangup and self.ended_mono is not None and self.ended_wall is not None
        reason, initiator = self.hangup
        duration = self.ended_mono - self.started
        talk = self.ended_mono - self.answered_mono if self.answered_mono is not None else 0.0
        if talk_time_seconds is not None and self.answered_mono is not None:
            talk = talk_time_seconds
        prices = self.options.prices
        summary = None
        if self.turns:
            summarize = self.options.summarize
            summary = await summarize(self.turns) if summarize else transcript_text(self.turns)
        end = EndReport(
            status=status or ("ended" if self.answered_mono is not None else "failed"),
            duration_seconds=whole_seconds(duration),
            talk_time_seconds=min(whole_seconds(talk), whole_seconds(duration)),
            hangup_reason=reason,
            hangup_initiator=initiator,
            ended_at=self.ended_wall,
            cost_breakdown=self.usage.cost(prices, duration, telephony_cost) if prices else None,
            recording_url=recording_url,
            metadata={"usage": self.usage.to_json(), **(metadata or {})},
        )
        self.reporter.finish(end, summary)
        return await self.reporter.wait()


def whole_seconds(value: float) -> int:
    """Seconds for a report: rounded to the nearest whole second, never negative."""
    return max(0, math.floor(value + 0.5))
