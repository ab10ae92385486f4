"""A typed async client of the runtime API (/internal/v1), the voice runtime's side of a call.

One `RuntimeClient` per process (it pools its connections). Every method answers a typed
record or raises a `RuntimeAPIError`: the service's error body becomes the exception of its
code, and a service that cannot be reached, or answers 5xx, raises `ServiceUnavailable`.

A request is repeated only where a repeat is safe. A request that never left (the connection
was refused or timed out while connecting) may always be sent again. One that was sent and
got no answer is sent again only where the runtime API makes a repeat harmless: a start with a
providerCallId, answered, ended, and a transcript that carries only a summary. Function calls,
dispatch and posts of transcript turns are never repeated once sent: the tenant's endpoint
would run twice, claimed calls would be lost, turns would be stored twice.
"""

import asyncio
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Self

import aiohttp

log = logging.getLogger(__name__)

DEFAULT_FUNCTION_TIMEOUT_MS = 5000
# The service answers a function call within its timeoutMs plus this (DESIGN section 4).
FUNCTION_ANSWER_MARGIN_S = 0.5
# What the network may add to that before the runtime stops waiting for the answer.
FUNCTION_NETWORK_MARGIN_S = 0.75

# -- errors -------------------------------------------------------------------------------------


class RuntimeAPIError(Exception):
    """Any failure of a runtime API request: the service's error body, or no answer at all.

    status is the HTTP status (None when no answer came), code the error body's code,
    details its details and request_id its requestId (None without a body).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str = "runtime_error",
        details: Mapping[str, Any] | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.details: Mapping[str, Any] = details or {}
        self.request_id = request_id

    def __str__(self) -> str:
        where = f" ({self.request_id})" if self.request_id else ""
        return f"{self.code}: {self.message}{where}"


class ServiceUnavailable(RuntimeAPIError):
    """The service could not be reached, gave no answer in time, or answered 5xx."""


class Unauthorized(RuntimeAPIError):
    """401: the runtime token is missing or wrong."""


class RuntimeDisabled(RuntimeAPIError):
    """503 runtime_disabled: the service has no RUNTIME_TOKEN set, so no runtime may report."""


class BadRequest(RuntimeAPIError):
    """400, 413 or 415: the request itself could not be read."""


class NotFound(RuntimeAPIError):
    """404: no such call."""


class ValidationFailed(RuntimeAPIError):
    """422: the body has invalid fields; details names each with its messages."""

    @property
    def unknown_fields(self) -> set[str]:
        """The fields this service does not take at all (an older service, say)."""
        return {
            name
            for name, messages in self.details.items()
            if isinstance(messages, list) and "Unknown field." in messages
        }


class Conflict(RuntimeAPIError):
    """409: the call's state does not allow the request."""


class CallRejected(Conflict):
    """A start the service turned away: the call is recorded as failed (call_id names it)."""

    @property
    def call_id(self) -> str | None:
        value = self.details.get("callId")
        return value if isinstance(value, str) else None


class NoAgent(CallRejected):
    """no_agent: no active number or agent answers the number."""


class NoCredits(CallRejected):
    """no_credits: the tenant has no credit minutes available."""


class ConcurrencyLimit(CallRejected):
    """concurrency_limit: the tenant already has as many calls as its plan allows."""


class IllegalTransition(Conflict):
    """illegal_transition: the call's status does not allow this step (details.status)."""


class CallNotActive(Conflict):
    """call_not_active: the call has ended, so its functions no longer run."""


ERRORS_BY_CODE: dict[str, type[RuntimeAPIError]] = {
    "no_agent": NoAgent,
    "no_credits": NoCredits,
    "concurrency_limit": ConcurrencyLimit,
    "illegal_transition": IllegalTransition,
    "call_not_active": CallNotActive,
    "runtime_disabled": RuntimeDisabled,
    "unauthorized": Unauthorized,
    "validation_error": ValidationFailed,
    "not_found": NotFound,
}
ERRORS_BY_STATUS: dict[int, type[RuntimeAPIError]] = {
    400: BadRequest,
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    413: BadRequest,
    415: BadRequest,
    422: ValidationFailed,
}


def error_from_answer(status: int, body: Any) -> RuntimeAPIError:
    """The exception for an error answer of the service (its JSON error body, or none)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {}
    code = str(error.get("code") or f"http_{status}")
    message = str(error.get("message") or f"The service answered HTTP {status}.")
    details = error.get("details") if isinstance(error.get("details"), dict) else {}
    kind = ERRORS_BY_CODE.get(code) or ERRORS_BY_STATUS.get(status)
    if kind is None:
        kind = ServiceUnavailable if status >= 500 else RuntimeAPIError
    return kind(
        message, status=status, code=code, details=details, request_id=error.get("requestId")
    )


# -- records ------------------------------------------------------------------------------------


def _timestamp(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def isoformat(moment: datetime) -> str:
    """The service's timestamp format: UTC, milliseconds, Z."""
    moment = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class FunctionSpec:
    """One of the agent's functions, as the LLM is to be told of it."""

    name: str
    description: str
    parameters: dict[str, Any]
    timeout_ms: int = DEFAULT_FUNCTION_TIMEOUT_MS  # the function's budget in the service

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            name=data["name"],
            description=data.get("description") or "",
            parameters=dict(data.get("parameters") or {"type": "object", "properties": {}}),
            timeout_ms=int(data.get("timeoutMs") or DEFAULT_FUNCTION_TIMEOUT_MS),
        )

    @property
    def answer_within_s(self) -> float:
        """How long the service may take to answer a call of this function."""
        return self.timeout_ms / 1000 + FUNCTION_ANSWER_MARGIN_S


@dataclass(frozen=True)
class Session:
    """What the runtime needs to run a call: the agent's configuration and its time limit.

    system_prompt and greeting_text come with the call's variables already filled in by
    the service; missing_variables names the placeholders that had no value.
    """

    agent_id: str
    system_prompt: str
    voice_id: str
    greeting_text: str
    language: str
    escalation_number: str | None
    tools_enabled: tuple[str, ...]
    functions: tuple[FunctionSpec, ...]
    max_call_duration_seconds: int
    agent_version: int | None = None
    missing_variables: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            agent_id=data["agentId"],
            system_prompt=data["systemPrompt"],
            voice_id=data.get("voiceId") or "",
            greeting_text=data.get("greetingText") or "",
            language=data.get("language") or "",
            escalation_number=data.get("escalationNumber"),
            tools_enabled=tuple(data.get("toolsEnabled") or ()),
            functions=tuple(FunctionSpec.from_json(each) for each in data.get("functions") or ()),
            max_call_duration_seconds=int(data["maxCallDurationSeconds"]),
            agent_version=data.get("agentVersion"),
            missing_variables=tuple(data.get("missingVariables") or ()),
        )

    def function(self, name: str) -> FunctionSpec | None:
        return next((spec for spec in self.functions if spec.name == name), None)


@dataclass(frozen=True)
class CostBreakdown:
    """A call's AI and telephony cost in IDR, by what it was spent on."""

    llm: int = 0
    stt: int = 0
    tts: int = 0
    telephony: int = 0
    other: int = 0

    @property
    def total(self) -> int:
        return self.llm + self.stt + self.tts + self.telephony + self.other

    def to_json(self) -> dict[str, int]:
        return {
            "llm": self.llm,
            "stt": self.stt,
            "tts": self.tts,
            "telephony": self.telephony,
            "other": self.other,
        }

    @classmethod
    def from_json(cls, data: Any) -> Self | None:
        if not isinstance(data, dict):
            return None
        return cls(**{name: int(data.get(name) or 0) for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Call:
    """A call as the service recorded it."""

    id: str
    status: str
    direction: str
    caller_number: str
    callee_number: str
    phone_number_id: str | None
    agent_id: str | None
    started_at: datetime | None
    answered_at: datetime | None
    ended_at: datetime | None
    duration_seconds: int | None
    talk_time_seconds: int | None
    hangup_reason: str | None
    hangup_initiator: str | None
    transcript_summary: str | None
    ai_cost_idr: int | None
    billed_minutes: int | None
    function_calls: int
    metadata: dict[str, Any]
    agent_version: int | None = None
    recording_url: str | None = None
    cost_breakdown: CostBreakdown | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            id=data["id"],
            status=data["status"],
            direction=data.get("direction") or "inbound",
            caller_number=data.get("callerNumber") or "",
            callee_number=data.get("calleeNumber") or "",
            phone_number_id=data.get("phoneNumberId"),
            agent_id=data.get("agentId"),
            started_at=_timestamp(data.get("startedAt")),
            answered_at=_timestamp(data.get("answeredAt")),
            ended_at=_timestamp(data.get("endedAt")),
            duration_seconds=data.get("durationSeconds"),
            talk_time_seconds=data.get("talkTimeSeconds"),
            hangup_reason=data.get("hangupReason"),
            hangup_initiator=data.get("hangupInitiator"),
            transcript_summary=data.get("transcriptSummary"),
            ai_cost_idr=data.get("aiCostIdr"),
            billed_minutes=data.get("billedMinutes"),
            function_calls=int(data.get("functionCalls") or 0),
            metadata=dict(data.get("metadata") or {}),
            agent_version=data.get("agentVersion"),
            recording_url=data.get("recordingUrl"),
            cost_breakdown=CostBreakdown.from_json(data.get("costBreakdown")),
        )


@dataclass(frozen=True)
class StartedCall:
    """A started call with its session; created is False when a repeated providerCallId
    answered the call recorded first."""

    call: Call
    session: Session
    created: bool = True


@dataclass(frozen=True)
class DispatchedCall:
    """An outbound call claimed from the service's queue: now ringing, the runtime dials it.
    channel is its number's (phone or whatsapp); whatsapp_phone_number_id is Meta's id of a
    WhatsApp number it is placed from (None for a phone number)."""

    call: Call
    session: Session
    channel: str = "phone"
    whatsapp_phone_number_id: str | None = None


@dataclass(frozen=True)
class WhatsAppNumber:
    """One of the tenants' WhatsApp Business numbers, as a runtime serves it: Meta's id of
    the number (Graph's /{id}/calls), its displayNumber (the did of its calls), the
    account's access token and app secret with the Graph API's base URL, and the service's
    id of the number. The secrets never show in its repr."""

    whatsapp_phone_number_id: str
    display_number: str
    access_token: str = field(repr=False)
    app_secret: str = field(repr=False)
    graph_url: str
    phone_number_id: str = ""  # the service's (pn_…)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            whatsapp_phone_number_id=str(data["whatsappPhoneNumberId"]),
            display_number=str(data["displayNumber"]),
            access_token=str(data["accessToken"]),
            app_secret=str(data["appSecret"]),
            graph_url=str(data["graphUrl"]).rstrip("/"),
            phone_number_id=str(data.get("phoneNumberId") or ""),
        )


@dataclass(frozen=True)
class FunctionError:
    code: str
    message: str


@dataclass(frozen=True)
class FunctionOutcome:
    """A function call's answer: the endpoint's result, or why there is none."""

    result: dict[str, Any] | None = None
    error: FunctionError | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        error = data.get("error")
        if isinstance(error, dict):
            return cls(error=FunctionError(str(error.get("code")), str(error.get("message"))))
        result = data.get("result")
        return cls(result=result if isinstance(result, dict) else {})

    @classmethod
    def failure(cls, code: str, message: str) -> Self:
        return cls(error=FunctionError(code, message))

    def for_llm(self) -> dict[str, Any]:
        """What to hand to the LLM: the result object, or {"error": {"code", "message"}}."""
        if self.error is not None:
            return {"error": {"code": self.error.code, "message": self.error.message}}
        return dict(self.result or {})


Role = Literal["agent", "caller"]
EndStatus = Literal["ended", "dropped", "failed"]


@dataclass(frozen=True)
class Turn:
    """One turn of the conversation; start_ms and end_ms count from the call's answer."""

    role: Role
    text: str
    start_ms: int | None = None
    end_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        turn: dict[str, Any] = {"role": self.role, "text": self.text}
        if self.start_ms is not None:
            turn["startMs"] = self.start_ms
        if self.end_ms is not None:
            turn["endMs"] = self.end_ms
        return turn


# -- the client ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """How often, and how far apart, a request that may be repeated is repeated."""

    attempts: int = 3
    first_delay_s: float = 0.2
    max_delay_s: float = 2.0

    def delay(self, attempt: int) -> float:
        return min(self.first_delay_s * 2 ** (attempt - 1), self.max_delay_s)


NEVER_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


@dataclass
class RuntimeClient:
    """The runtime API of one service: base_url (http://host:port) and its RUNTIME_TOKEN.

    Use it as an async context manager, or call close() when done. timeout_s bounds each
    request but function calls, which get the function's own budget.
    """

    base_url: str
    token: str
    timeout_s: float = 10.0
    connect_timeout_s: float = 3.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    user_agent: str = "voiceagent-bridge"
    _session: aiohttp.ClientSession | None = field(default=None, init=False, repr=False)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                base_url=self.base_url.rstrip("/") + "/",
                headers={
                    "Authorization": f"Bearer {self.token}",
                    "User-Agent": self.user_agent,
                },
            )
        return self._session

    async def start_call(
        self,
        *,
        did: str,
        caller_number: str,
        direction: Literal["inbound", "outbound"] = "inbound",
        provider_call_id: str | None = None,
        variables: Mapping[str, str] | None = None,
    ) -> StartedCall:
        """Report a new call and get its session (POST /calls).

        Raises NoAgent, NoCredits or ConcurrencyLimit when the service turns the call away.
        Repeated when no answer came only with a provider_call_id (a repeat then answers the
        call recorded first).
        """
        body: dict[str, Any] = {"did": did, "callerNumber": caller_number, "direction": direction}
        if provider_call_id is not None:
            body["providerCallId"] = provider_call_id
        if variables:
            body["variables"] = dict(variables)
        status, data = await self._post(
            "internal/v1/calls", body, idempotent=provider_call_id is not None
        )
        return StartedCall(
            call=Call.from_json(data),
            session=Session.from_json(data["session"]),
            created=status == 201,
        )

    async def answer_call(self, call_id: str, *, answered_at: datetime | None = None) -> Call:
        """Report that the agent answered (ringing → answered); a repeat changes nothing."""
        body = {"answeredAt": isoformat(answered_at)} if answered_at else {}
        _, data = await self._post(f"internal/v1/calls/{call_id}/answered", body, idempotent=True)
        return Call.from_json(data)

    async def add_transcript(
        self,
        call_id: str,
        *,
        summary: str | None = None,
        turns: Sequence[Turn] = (),
    ) -> Call:
        """Report the transcript: a summary, turns to append in order, or both.

        A summary alone is repeated when no answer came (the same text again changes
        nothing); turns are not (they would be appended twice).
        """
        body: dict[str, Any] = {}
        if summary is not None:
            body["transcriptSummary"] = summary
        if turns:
            body["turns"] = [turn.to_json() for turn in turns]
        _, data = await self._post(
            f"internal/v1/calls/{call_id}/transcript", body, idempotent=not turns
        )
        return Call.from_json(data)

    async def invoke_function(
        self,
        call_id: str,
        name: str,
        parameters: Mapping[str, Any],
        *,
        timeout_ms: int = DEFAULT_FUNCTION_TIMEOUT_MS,
    ) -> FunctionOutcome:
        """Run one of the agent's functions; the endpoint's result or the error object.

        Both are answers to hand to the LLM. Never repeated once sent: the tenant's endpoint
        must not run twice. Raises CallNotActive once the call has ended, ServiceUnavailable
        when no answer came within the function's budget plus the margins.
        """
        budget = timeout_ms / 1000 + FUNCTION_ANSWER_MARGIN_S + FUNCTION_NETWORK_MARGIN_S
        _, data = await self._post(
            f"internal/v1/calls/{call_id}/function-calls",
            {"functionName": name, "parameters": dict(parameters)},
            idempotent=False,
            timeout_s=budget,
        )
        return FunctionOutcome.from_json(data)

    async def end_call(
        self,
        call_id: str,
        *,
        status: EndStatus,
        duration_seconds: int,
        talk_time_seconds: int,
        hangup_reason: str,
        hangup_initiator: str,
        ai_cost_idr: int | None = None,
        cost_breakdown: CostBreakdown | None = None,
        recording_url: str | None = None,
        ended_at: datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Call:
        """Report that the call ended; the service charges its minutes once.

        aiCostIdr defaults to the breakdown's total (0 without one). A repeat with the same
        status changes and charges nothing, so it is repeated when no answer came.
        """
        if ai_cost_idr is None:
            ai_cost_idr = cost_breakdown.total if cost_breakdown else 0
        body: dict[str, Any] = {
            "status": status,
            "durationSeconds": duration_seconds,
            "talkTimeSeconds": talk_time_seconds,
            "hangupReason": hangup_reason,
            "hangupInitiator": hangup_initiator,
            "aiCostIdr": ai_cost_idr,
        }
        if cost_breakdown is not None:
            body["costBreakdown"] = cost_breakdown.to_json()
        if recording_url is not None:
            body["recordingUrl"] = recording_url
        if ended_at is not None:
            body["endedAt"] = isoformat(ended_at)
        if metadata:
            body["metadata"] = dict(metadata)
        _, data = await self._post(f"internal/v1/calls/{call_id}/ended", body, idempotent=True)
        return Call.from_json(data)

    async def dispatch(
        self, *, max_calls: int = 1, channel: str | None = None
    ) -> list[DispatchedCall]:
        """Claim up to max_calls queued outbound calls (oldest first), each now ringing; only
        those placed from a number of channel ("phone" or "whatsapp") when it is named, so
        that a runtime leaves the calls it cannot place to another.

        Never repeated once sent: a claim whose answer was lost cannot be claimed again.
        """
        body: dict[str, Any] = {"max": max_calls}
        if channel is not None:
            body["channel"] = channel
        _, data = await self._post("internal/v1/dispatch", body, idempotent=False)
        return [
            DispatchedCall(
                call=Call.from_json(each["call"]),
                session=Session.from_json(each["session"]),
                channel=str(each.get("channel") or "phone"),
                whatsapp_phone_number_id=each.get("whatsappPhoneNumberId"),
            )
            for each in data.get("calls") or ()
        ]

    async def whatsapp_number(self, whatsapp_phone_number_id: str) -> WhatsAppNumber:
        """The WhatsApp number of Meta's id whatsapp_phone_number_id with its account's
        secrets (GET /whatsapp/numbers/:id); NotFound when it is unknown or inactive."""
        _, data = await self._request(
            "GET",
            f"internal/v1/whatsapp/numbers/{whatsapp_phone_number_id}",
            None,
            idempotent=True,
        )
        return WhatsAppNumber.from_json(data)

    async def whatsapp_events(self, values: Sequence[Mapping[str, Any]]) -> None:
        """Hand the service the value objects of Meta's messages webhooks (call permission
        replies among them). Repeated when no answer came: a reply told twice is the same
        reply."""
        await self._post(
            "internal/v1/whatsapp/events", {"values": [dict(v) for v in values]}, idempotent=True
        )

    async def _post(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        idempotent: bool,
        timeout_s: float | None = None,
    ) -> tuple[int, dict[str, Any]]:
        return await self._request("POST", path, body, idempotent=idempotent, timeout_s=timeout_s)

    async def _request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        *,
        idempotent: bool,
        timeout_s: float | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """Send body (JSON, for a POST); the status and JSON body of a 2xx answer, else the
        exception.

        A request that never left is sent again, up to the retry policy's attempts, within
        its time budget; one that was sent is sent again only when idempotent (each repeat
        then gets the whole budget again: its answer is the first one's).
        """
        budget = timeout_s or self.timeout_s
        deadline = time.monotonic() + budget
        attempt = 0
        while True:
            attempt += 1
            timeout = budget if idempotent else deadline - time.monotonic()
            try:
                return await self._send(method, path, body, timeout)
            except ServiceUnavailable as exc:
                never_sent = isinstance(exc.__cause__, NEVER_SENT)
                pause = self.retry.delay(attempt)
                if (
                    attempt >= self.retry.attempts
                    or not (never_sent or idempotent)
                    or (not idempotent and time.monotonic() + pause >= deadline)
                ):
                    raise
                log.info("runtime API %s: %s; repeating in %.2f s", path, exc, pause)
                await asyncio.sleep(pause)

    async def _send(
        self, method: str, path: str, body: Mapping[str, Any] | None, timeout_s: float
    ) -> tuple[int, dict[str, Any]]:
        timeout = aiohttp.ClientTimeout(
            total=max(timeout_s, 0.01), connect=min(self.connect_timeout_s, max(timeout_s, 0.01))
        )
        try:
            async with self._http().request(method, path, json=body, timeout=timeout) as response:
                text = await response.text()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ServiceUnavailable(
                f"No answer from the service ({type(exc).__name__}: {exc}).",
                code="service_unavailable",
            ) from exc
        try:
            data = json.loads(text) if text else {}
        except ValueError:
            data = None
        if 200 <= status < 300 and isinstance(data, dict):
            return status, data
        if 200 <= status < 300:
            raise ServiceUnavailable(
                f"The service answered HTTP {status} without a JSON object.",
                status=status,
                code="invalid_answer",
            )
        raise error_from_answer(status, data)
