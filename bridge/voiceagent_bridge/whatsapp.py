"""WhatsApp Business calls (Meta's Cloud API calling) for a voice runtime of the service.

A `WhatsAppLine` is a bot's side of them. Meta posts every event of every number of the app
to one webhook: `receive` checks its X-Hub-Signature-256 against the number's app secret (from
the service's runtime API, kept for a minute), and the server answers 200 at once while the
events are handled after (Meta repeats anything but a 2xx for days). The payload is read here,
tolerantly: Pipecat's own webhook models refuse status events and real terminate payloads.

- A user's call (connect with an SDP offer): the call is started with the service (did the
  number's displayNumber, providerCallId Meta's call id, callerNumber "+" and the user's
  digits); refused, Graph `reject`; admitted, the WebRTC answer (Pipecat's SmallWebRTC
  connection), Graph `pre_accept` and `accept` with that same answer, and the call's
  pipeline, which sends audio (silence included) from the start. It is answered when the
  media flows; Meta's terminate ends it with Meta's duration as its talk time; the agent's
  limit ends it with Graph `terminate`.
- A business-initiated call (`dispatch_forever`): claimed from the service, from WhatsApp
  numbers only (dispatch's channel `whatsapp`: calls from phone numbers stay queued for a
  telephony runtime), with Meta's id of the number it is placed from; a WebRTC offer, Graph
  `connect` from that number (biz_opaque_callback_data the call's id); the connect webhook
  brings the answer; ACCEPTED answers it, REJECTED fails it `declined`, no answer in time fails it
  `no_answer` (after Graph `terminate`), Graph error 138006 fails it `no_call_permission`.
- `messages` changes (call permission replies among them) go to the service's events route.

More than one bot process may serve the one webhook URL: with a `Handoff` (Redis pub/sub),
the process that holds a call listens on the call's channel, and one that gets a webhook for a
call it does not hold publishes it there; a stopping process takes no new call (it hands a new
one to a live process) and ends once its calls have ended.
"""

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import json
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.transports.base_transport import TransportParams
from pipecat.transports.smallwebrtc.connection import IceServer, SmallWebRTCConnection
from pipecat.transports.smallwebrtc.transport import SmallWebRTCTransport
from pipecat.workers.runner import WorkerRunner

from voiceagent_bridge.bridge import (
    BridgeOptions,
    CallBridge,
    RealtimeServices,
    ServiceFeatures,
    VoiceServices,
)
from voiceagent_bridge.client import (
    Call,
    CallRejected,
    DispatchedCall,
    NotFound,
    RuntimeAPIError,
    RuntimeClient,
    Session,
    WhatsAppNumber,
)

log = logging.getLogger(__name__)

WEBHOOK_PATH = "/whatsapp/webhook"
NO_CALL_PERMISSION = 138006  # Graph's error code: the user gave the business no permission
PULSE_S = 6  # Meta bills business-initiated calls per started pulse of this many seconds
NUMBER_TTL_S = 60.0  # how long a number's lookup (its secrets) is kept
UNKNOWN_NUMBER_TTL_S = 10.0  # how long "no such number" is kept

ServicesFactory = Callable[[Call, Session], VoiceServices | RealtimeServices]


# -- Meta's webhooks ----------------------------------------------------------------------------


def verify_subscription(params: Mapping[str, str], verify_token: str) -> str | None:
    """The challenge to echo for Meta's GET verification, or None when it is not ours."""
    if not verify_token:
        return None
    if params.get("hub.mode") != "subscribe" or not params.get("hub.challenge"):
        return None
    if not hmac.compare_digest(params.get("hub.verify_token") or "", verify_token):
        return None
    return params["hub.challenge"]


def signature_valid(body: bytes, header: str | None, app_secret: str) -> bool:
    """Whether X-Hub-Signature-256 (sha256=<hex>) is body's HMAC under the app secret."""
    if not header or not header.startswith("sha256=") or not app_secret:
        return False
    expected = hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header.removeprefix("sha256="))


def sign(body: bytes, app_secret: str) -> str:
    """The X-Hub-Signature-256 header Meta sends with body."""
    return "sha256=" + hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class CallEvent:
    """A `calls` change: a call's connect (with its SDP) or terminate."""

    phone_number_id: str
    call_id: str
    event: str  # connect | terminate
    user: str  # the WhatsApp user's digits (from for theirs, to for the business's)
    direction: str  # USER_INITIATED | BUSINESS_INITIATED
    sdp: str | None = None
    sdp_type: str | None = None
    status: str | None = None  # of a terminate: COMPLETED, FAILED, …
    duration: int | None = None  # seconds connected, of a terminate
    opaque: str | None = None  # biz_opaque_callback_data: the service's call id
    errors: tuple[dict[str, Any], ...] = ()
    kind: Literal["call"] = "call"

    @property
    def business_initiated(self) -> bool:
        return self.direction == "BUSINESS_INITIATED" or self.sdp_type == "answer"


@dataclass(frozen=True)
class StatusEvent:
    """A call's status of a business-initiated call: RINGING, ACCEPTED or REJECTED."""

    phone_number_id: str
    call_id: str
    status: str
    opaque: str | None = None
    kind: Literal["status"] = "status"


Event = CallEvent | StatusEvent


@dataclass
class Webhook:
    """What one webhook post holds: call events, the messages values to forward, and the
    numbers (Meta's ids) they are about."""

    events: list[Event] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def numbers(self) -> set[str]:
        found = {event.phone_number_id for event in self.events}
        found |= {str(value["metadata"]["phone_number_id"]) for value in self.messages}
        return found


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _seconds(value: Any) -> int | None:
    try:
        return max(0, round(float(value)))
    except (TypeError, ValueError):
        return None


def _text(value: Any) -> str | None:
    return str(value) if isinstance(value, (str, int)) and str(value) else None


def parse_webhook(payload: Any) -> Webhook:
    """Meta's webhook payload, read tolerantly: what is not understood is left out."""
    found = Webhook()
    for entry in _list(_dict(payload).get("entry")):
        for change in _list(_dict(entry).get("changes")):
            change = _dict(change)
            value = _dict(change.get("value"))
            number = _text(_dict(value.get("metadata")).get("phone_number_id"))
            if number is None:
                continue
            if change.get("field") == "calls":
                found.events.extend(_call_events(number, value))
            elif change.get("field") == "messages" and isinstance(value.get("messages"), list):
                found.messages.append(value)
    return found


def _call_events(number: str, value: dict[str, Any]) -> Iterable[Event]:
    for call in _list(value.get("calls")):
        if not isinstance(call, dict):
            continue
        call_id, event = _text(call.get("id")), call.get("event")
        if call_id is None or event not in ("connect", "terminate"):
            continue
        session = _dict(call.get("session"))
        direction = str(call.get("direction") or "USER_INITIATED").upper()
        user = call.get("to") if direction == "BUSINESS_INITIATED" else call.get("from")
        errors = _list(call.get("errors"))
        yield CallEvent(
            phone_number_id=number,
            call_id=call_id,
            event=event,
            user="".join(ch for ch in str(user or "") if ch.isdigit()),
            direction=direction,
            sdp=_text(session.get("sdp")),
            sdp_type=_text(session.get("sdp_type")),
            status=_text(call.get("status")),
            duration=_seconds(call.get("duration")),
            opaque=_text(call.get("biz_opaque_callback_data")),
            errors=tuple(error for error in errors if isinstance(error, dict)),
        )  # fmt: skip
    for status in _list(value.get("statuses")):
        if not isinstance(status, dict) or status.get("type", "call") != "call":
            continue
        call_id, state = _text(status.get("id")), _text(status.get("status"))
        if call_id is None or state is None:
            continue
        yield StatusEvent(
            phone_number_id=number,
            call_id=call_id,
            status=state.upper(),
            opaque=_text(status.get("biz_opaque_callback_data")),
        )


def event_to_json(event: Event) -> str:
    return json.dumps(dataclasses.asdict(event))


def event_from_json(text: str | bytes) -> Event:
    data = json.loads(text)
    if data.get("kind") == "status":
        return StatusEvent(**data)
    data["errors"] = tuple(data.get("errors") or ())
    return CallEvent(**data)


def whatsapp_sdp(sdp: str) -> str:
    """An SDP as Meta takes it: SHA-256 fingerprints only."""
    lines = [
        line
        for line in sdp.splitlines()
        if not line.startswith("a=fingerprint:") or line.startswith("a=fingerprint:sha-256")
    ]
    return "\r\n".join(lines) + "\r\n"


# -- the Graph API ------------------------------------------------------------------------------


class GraphError(Exception):
    """Graph answered an error (code is Meta's error code, 0 when none came)."""

    def __init__(self, message: str, *, status: int | None = None, code: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass
class GraphAPI:
    """Meta's calling endpoints (POST {graphUrl}/{whatsappPhoneNumberId}/calls), with the number's
    token. One per process (it pools its connections)."""

    timeout_s: float = 10.0
    _session: aiohttp.ClientSession | None = field(default=None, init=False, repr=False)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def calls(self, number: WhatsAppNumber, body: Mapping[str, Any]) -> dict[str, Any]:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        url = f"{number.graph_url}/{number.whatsapp_phone_number_id}/calls"
        try:
            async with self._session.post(
                url,
                json={"messaging_product": "whatsapp", **body},
                headers={"Authorization": f"Bearer {number.access_token}"},
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            ) as response:
                status = response.status
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise GraphError(f"Graph did not answer ({type(exc).__name__})") from exc
        try:
            data = json.loads(text) if text else {}
        except ValueError:
            data = {}
        data = data if isinstance(data, dict) else {}
        error = data.get("error")
        if status >= 300 or isinstance(error, dict):
            error = error if isinstance(error, dict) else {}
            raise GraphError(
                str(error.get("message") or f"Graph answered HTTP {status}"),
                status=status,
                code=int(error.get("code") or 0),
            )
        return data

    async def pre_accept(self, number: WhatsAppNumber, call_id: str, sdp: str) -> None:
        await self.calls(number, _answer_body(call_id, "pre_accept", sdp))

    async def accept(self, number: WhatsAppNumber, call_id: str, sdp: str) -> None:
        await self.calls(number, _answer_body(call_id, "accept", sdp))

    async def reject(self, number: WhatsAppNumber, call_id: str) -> None:
        await self.calls(number, {"call_id": call_id, "action": "reject"})

    async def terminate(self, number: WhatsAppNumber, call_id: str) -> None:
        await self.calls(number, {"call_id": call_id, "action": "terminate"})

    async def connect(self, number: WhatsAppNumber, to: str, sdp: str, opaque: str) -> str:
        """Call the user to (digits) with the offer sdp; Meta's id of the new call."""
        data = await self.calls(
            number,
            {
                "to": to,
                "action": "connect",
                "session": {"sdp_type": "offer", "sdp": sdp},
                "biz_opaque_callback_data": opaque,
            },
        )
        calls = data.get("calls")
        if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
            raise GraphError("Graph's connect named no call")
        return str(calls[0].get("id"))


def _answer_body(call_id: str, action: str, sdp: str) -> dict[str, Any]:
    return {"call_id": call_id, "action": action, "session": {"sdp_type": "answer", "sdp": sdp}}


# -- the numbers --------------------------------------------------------------------------------


@dataclass
class NumberDirectory:
    """The service's WhatsApp numbers by Meta's id, each lookup kept for a while."""

    client: RuntimeClient
    ttl_s: float = NUMBER_TTL_S
    unknown_ttl_s: float = UNKNOWN_NUMBER_TTL_S
    _known: dict[str, tuple[float, WhatsAppNumber | None]] = field(default_factory=dict)

    async def get(self, phone_number_id: str) -> WhatsAppNumber | None:
        """The number (None when the service knows no active one); the service's
        ServiceUnavailable when it cannot be asked."""
        kept = self._known.get(phone_number_id)
        if kept is not None and kept[0] > time.monotonic():
            return kept[1]
        try:
            number: WhatsAppNumber | None = await self.client.whatsapp_number(phone_number_id)
        except NotFound:
            number = None
        ttl = self.ttl_s if number is not None else self.unknown_ttl_s
        self._known[phone_number_id] = (time.monotonic() + ttl, number)
        return number


# -- more than one process ----------------------------------------------------------------------


class Handoff:
    """Hands a call's webhooks to the process that holds the call, over Redis pub/sub.

    The holder subscribes to the call's channels (Meta's call id, and the service's for a
    business-initiated call); another process publishes there what it received. Live
    processes also listen for new calls a stopping process hands on; the first to claim one
    takes it.
    """

    PREFIX = "voiceagent:whatsapp:"

    def __init__(self, redis_url: str) -> None:
        import redis.asyncio

        self.redis = redis.asyncio.Redis.from_url(redis_url)
        # Pub/sub channels are the server's, not a database's: the database is in their names.
        self.prefix = f"{self.PREFIX}{self.redis.connection_pool.connection_kwargs.get('db', 0)}:"
        self.pubsub = self.redis.pubsub()
        self.node = uuid.uuid4().hex
        self._task: asyncio.Task[None] | None = None
        self._on_call: Callable[[Event], Awaitable[None]] | None = None
        self._on_new: Callable[[Event], Awaitable[None]] | None = None

    def channel(self, key: str) -> str:
        return f"{self.prefix}call:{key}"

    @property
    def new_calls(self) -> str:
        return f"{self.prefix}new"

    async def start(
        self,
        on_call: Callable[[Event], Awaitable[None]],
        on_new: Callable[[Event], Awaitable[None]],
    ) -> None:
        self._on_call, self._on_new = on_call, on_new
        await self.pubsub.subscribe(self.new_calls)
        self._task = asyncio.create_task(self._listen(), name="whatsapp handoff")

    async def hold(self, *keys: str) -> None:
        await self.pubsub.subscribe(*(self.channel(key) for key in keys))

    async def release(self, *keys: str) -> None:
        with contextlib.suppress(Exception):
            await self.pubsub.unsubscribe(*(self.channel(key) for key in keys))

    async def relay(self, key: str, event: Event) -> bool:
        """Publish event to the holder of key; whether a process listens there."""
        return bool(await self.redis.publish(self.channel(key), event_to_json(event)))

    async def offer_new(self, event: Event) -> bool:
        """Hand a new call on to the live processes; whether one listens."""
        return bool(await self.redis.publish(self.new_calls, event_to_json(event)))

    async def stop_taking(self) -> None:
        with contextlib.suppress(Exception):
            await self.pubsub.unsubscribe(self.new_calls)

    async def _listen(self) -> None:
        while True:
            if not self.pubsub.subscribed:  # a stopping process whose calls have all ended
                await asyncio.sleep(0.2)
                continue
            try:
                message = await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis went away: try again shortly
                log.warning("handoff: %s", exc)
                await asyncio.sleep(1.0)
                continue
            if message is None:
                continue
            try:
                event = event_from_json(message["data"])
                channel = message["channel"]
                channel = channel.decode() if isinstance(channel, bytes) else channel
                if channel == self.new_calls:
                    claim = f"{self.prefix}claim:{event.call_id}"
                    if await self.redis.set(claim, self.node, nx=True, ex=300):
                        assert self._on_new is not None
                        await self._on_new(event)
                else:
                    assert self._on_call is not None
                    await self._on_call(event)
            except Exception:
                log.exception("handoff: a relayed event failed")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(Exception):
            await self.pubsub.aclose()
        with contextlib.suppress(Exception):
            await self.redis.aclose()


# -- the calls ----------------------------------------------------------------------------------


@dataclass
class WhatsAppCall:
    """One call this process holds: the number, Meta's id (a business-initiated call has it
    once Graph's connect answered), the user, the bridge and the WebRTC connection."""

    number: WhatsAppNumber
    user: str
    direction: Literal["inbound", "outbound"]
    bridge: CallBridge
    connection: SmallWebRTCConnection
    meta_call_id: str | None = None
    worker: PipelineWorker | None = None
    accepted: bool = False  # outbound: the user accepted
    terminated: bool = False  # Meta ended it (no terminate of ours is needed)
    meta_duration: int | None = None
    sdp_answer: asyncio.Future[str] | None = None
    over: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def keys(self) -> list[str]:
        keys = [self.bridge.call.id]
        if self.meta_call_id:
            keys.append(self.meta_call_id)
        return keys


class WhatsAppLine:
    """A bot's WhatsApp calls: Meta's webhooks in, Graph calls out, one `CallBridge` each.

    services makes each call's speech and language services; options are the bridge's;
    ice_servers are the STUN/TURN servers of its WebRTC connections (none: host candidates
    only); no_answer_s is how long a business-initiated call rings before it is given up;
    handoff, when given, shares the calls with the other processes behind the webhook;
    run_call runs a call once answered (default `converse`: its pipeline to the end).
    """

    def __init__(
        self,
        client: RuntimeClient,
        services: ServicesFactory,
        *,
        options: BridgeOptions | None = None,
        verify_token: str = "",
        ice_servers: Sequence[IceServer] = (),
        no_answer_s: float = 60.0,
        handoff: Handoff | None = None,
        graph: GraphAPI | None = None,
        max_calls: int = 20,
        run_call: "Callable[[WhatsAppLine, WhatsAppCall], Awaitable[None]] | None" = None,
    ) -> None:
        self.client = client
        self.services = services
        self.options = options or BridgeOptions()
        self.verify_token = verify_token
        self.ice_servers = list(ice_servers)
        self.no_answer_s = no_answer_s
        self.handoff = handoff
        self.graph = graph or GraphAPI()
        self.max_calls = max_calls
        self.run_call = run_call or WhatsAppLine.converse
        self.directory = NumberDirectory(client)
        self.features = ServiceFeatures()
        self.calls: dict[str, WhatsAppCall] = {}  # by Meta's id and by the service's id
        self.tasks: set[asyncio.Task[Any]] = set()
        self.taking = True

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.handoff is not None:
            await self.handoff.start(self._relayed, self._handed_new)

    async def drain(self, timeout_s: float | None = None) -> None:
        """Take no new call, and wait until the calls held have ended."""
        self.taking = False
        if self.handoff is not None:
            await self.handoff.stop_taking()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=timeout_s)

    async def close(self) -> None:
        """Stop now: end the calls still held, close their connections, and the clients."""
        self.taking = False
        for held in set(self.calls.values()):
            held.bridge.end_now("runtime_stopped", initiator="system")
            await self._stop_call(held)
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=10)
        if self.handoff is not None:
            await self.handoff.close()
        await self.graph.close()

    def _spawn(self, work: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(work)
        task.set_name(name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    @property
    def active(self) -> int:
        return len({id(held) for held in self.calls.values()})

    # -- the webhook ----------------------------------------------------------------------------

    async def receive(self, body: bytes, signature: str | None) -> int:
        """One webhook post: its HTTP status. 401 when its signature is not the app secret's
        of a number it names; 400 when it is no JSON; else 200, with its events handled
        after. The service's ServiceUnavailable when the numbers cannot be looked up."""
        try:
            payload = json.loads(body)
        except ValueError:
            return 400
        webhook = parse_webhook(payload)
        numbers: dict[str, WhatsAppNumber] = {}
        for phone_number_id in webhook.numbers:
            number = await self.directory.get(phone_number_id)
            if number is None:
                log.info("webhook for number %s, which the service does not know", phone_number_id)
                continue
            if not signature_valid(body, signature, number.app_secret):
                log.warning("webhook for number %s: bad signature", phone_number_id)
                return 401
            numbers[phone_number_id] = number
        events = [event for event in webhook.events if event.phone_number_id in numbers]
        messages = [
            value
            for value in webhook.messages
            if str(value["metadata"]["phone_number_id"]) in numbers
        ]
        if events or messages:
            self._spawn(self._handle_webhook(numbers, events, messages), "whatsapp webhook")
        return 200

    async def _handle_webhook(
        self,
        numbers: Mapping[str, WhatsAppNumber],
        events: Sequence[Event],
        messages: Sequence[dict[str, Any]],
    ) -> None:
        if messages:
            try:
                await self.client.whatsapp_events(messages)
            except RuntimeAPIError as exc:
                log.error("whatsapp messages not handed to the service: %s", exc)
        for event in events:
            try:
                await self._route(numbers[event.phone_number_id], event)
            except Exception:
                log.exception("whatsapp event %s of call %s failed", event.kind, event.call_id)

    def _held(self, event: Event) -> WhatsAppCall | None:
        return (self.calls.get(event.opaque) if event.opaque else None) or self.calls.get(
            event.call_id
        )

    async def _route(self, number: WhatsAppNumber, event: Event) -> None:
        held = self._held(event)
        if held is not None:
            await self._on_event(held, event)
            return
        if (
            isinstance(event, CallEvent)
            and event.event == "connect"
            and not event.business_initiated
        ):
            if await self._relay(event):
                return  # Meta repeated a connect whose call another process holds
            if self.taking:  # the call runs on: the webhook's other events go on meanwhile
                self._spawn(self._take(number, event), f"whatsapp call {event.call_id}")
            elif self.handoff is not None and await self.handoff.offer_new(event):
                log.info("call %s handed to a live process", event.call_id)
            else:
                log.warning("call %s arrived while stopping: rejected", event.call_id)
                await self._graph_quietly(self.graph.reject(number, event.call_id))
            return
        if not await self._relay(event):
            log.info("whatsapp %s of call %s, which no process holds", event.kind, event.call_id)

    async def _relay(self, event: Event) -> bool:
        if self.handoff is None:
            return False
        for key in filter(None, (event.opaque, event.call_id)):
            if await self.handoff.relay(key, event):
                return True
        return False

    async def _relayed(self, event: Event) -> None:
        """An event another process received for a call this one holds."""
        held = self._held(event)
        if held is not None:
            await self._on_event(held, event)

    async def _handed_new(self, event: Event) -> None:
        """A new call a stopping process handed on."""
        if not isinstance(event, CallEvent) or not self.taking:
            return
        number = await self.directory.get(event.phone_number_id)
        if number is not None:
            self._spawn(self._take(number, event), f"whatsapp call {event.call_id}")

    async def _on_event(self, held: WhatsAppCall, event: Event) -> None:
        """A later event of a call held here."""
        if isinstance(event, CallEvent) and event.event == "terminate":
            held.terminated = True
            held.meta_duration = event.duration
            if held.direction == "outbound" and not held.accepted:
                held.bridge.end_now("no_answer", initiator="callee")
            else:
                await held.bridge.caller_hung_up()
            await self._stop_call(held)
        elif isinstance(event, CallEvent) and event.event == "connect" and event.sdp:
            if held.sdp_answer is not None and not held.sdp_answer.done():
                held.meta_call_id = held.meta_call_id or event.call_id
                held.sdp_answer.set_result(event.sdp)
        elif isinstance(event, StatusEvent) and held.direction == "outbound":
            if event.status == "ACCEPTED" and not held.accepted:
                held.accepted = True
                if held.worker is not None:
                    await held.bridge.answered()
            elif event.status == "REJECTED":
                held.terminated = True
                held.bridge.end_now("declined", initiator="callee")
                await self._stop_call(held)

    async def _stop_call(self, held: WhatsAppCall) -> None:
        held.over.set()
        if held.worker is not None and not held.worker.has_finished():
            await held.worker.cancel(reason="the call ended")

    # -- a user's call --------------------------------------------------------------------------

    async def _take(self, number: WhatsAppNumber, event: CallEvent) -> None:
        """A user's call to number: start it with the service, answer it, run it."""
        started = time.monotonic()
        try:
            begun = await self.client.start_call(
                did=number.display_number,
                caller_number=f"+{event.user}",
                provider_call_id=event.call_id,
            )
        except CallRejected as exc:
            log.info("call %s refused by the service: %s", event.call_id, exc.code)
            await self._graph_quietly(self.graph.reject(number, event.call_id))
            return
        except RuntimeAPIError as exc:
            log.error("call %s not started: %s", event.call_id, exc)
            await self._graph_quietly(self.graph.reject(number, event.call_id))
            return
        if not begun.created:
            log.info("call %s was started before: left to its holder", event.call_id)
            return
        bridge = self._bridge(begun.call, begun.session, started, inbound=True)
        connection = SmallWebRTCConnection(ice_servers=self.ice_servers)
        held = WhatsAppCall(number, event.user, "inbound", bridge, connection, event.call_id)
        await self._hold(held)
        try:
            await connection.initialize(sdp=event.sdp or "", type="offer")
            answer = connection.get_answer()
            if answer is None:
                raise ValueError("no SDP answer")
            sdp = whatsapp_sdp(answer["sdp"])
        except Exception as exc:
            log.error("call %s: its offer could not be answered: %s", event.call_id, exc)
            await self._graph_quietly(self.graph.reject(number, event.call_id))
            held.terminated = True
            bridge.end_now("runtime_error", initiator="system")
            await self._release(held)
            return
        try:
            await self.graph.pre_accept(number, event.call_id, sdp)
            # The pipeline starts before the accept, so that audio flows from the start.
            self._build(held)
            await self.graph.accept(number, event.call_id, sdp)
        except Exception as exc:  # Graph refused it, or its pipeline could not be built
            log.error("call %s: not accepted: %s", event.call_id, exc)
            await self._graph_quietly(self.graph.terminate(number, event.call_id))
            held.terminated = True
            bridge.end_now("runtime_error", initiator="system")
            await self._release(held)  # its pipeline never ran
            return
        await self.run_call(self, held)

    # -- a business-initiated call --------------------------------------------------------------

    async def dispatch_forever(self, interval_s: float = 1.0) -> None:
        """Claim the service's queued outbound calls while there is room, and place each."""
        while True:
            room = self.max_calls - self.active
            if room > 0 and self.taking:
                try:
                    claimed = await self.client.dispatch(
                        max_calls=min(room, 50), channel="whatsapp"
                    )
                except RuntimeAPIError as exc:
                    log.warning("dispatch: %s", exc)
                    claimed = []
                for dispatched in claimed:
                    self._spawn(self.place(dispatched), f"whatsapp call {dispatched.call.id}")
            await asyncio.sleep(interval_s)

    async def _number_for(self, dispatched: DispatchedCall) -> WhatsAppNumber | None:
        """The WhatsApp number a claimed call is placed from, by the Meta id dispatch names;
        None for a call from a phone number, or a number the service no longer serves."""
        if dispatched.channel != "whatsapp" or not dispatched.whatsapp_phone_number_id:
            return None
        with contextlib.suppress(RuntimeAPIError):
            return await self.directory.get(dispatched.whatsapp_phone_number_id)
        return None

    async def place(self, dispatched: DispatchedCall) -> None:
        """Call the user of a claimed call from its WhatsApp number."""
        call, started = dispatched.call, time.monotonic()
        bridge = self._bridge(call, dispatched.session, started, inbound=False)
        number = await self._number_for(dispatched)
        if number is None:
            log.error("call %s: %s is no WhatsApp number served", call.id, call.caller_number)
            bridge.end_now("no_route", initiator="system")
            await bridge.finish()
            return
        user = "".join(ch for ch in call.callee_number if ch.isdigit())
        connection = SmallWebRTCConnection(ice_servers=self.ice_servers)
        held = WhatsAppCall(number, user, "outbound", bridge, connection)
        held.sdp_answer = asyncio.get_running_loop().create_future()
        await self._hold(held)
        try:
            connection.pc.addTransceiver("audio", direction="sendrecv")
            await connection.pc.setLocalDescription(await connection.pc.createOffer())
            offer = whatsapp_sdp(connection.pc.localDescription.sdp)
            held.meta_call_id = await self.graph.connect(number, user, offer, call.id)
        except Exception as exc:
            if isinstance(exc, GraphError):
                reason = (
                    "no_call_permission" if exc.code == NO_CALL_PERMISSION else "provider_error"
                )
            else:
                reason = "runtime_error"
            log.info("call %s not placed: %s", call.id, exc)
            bridge.end_now(reason, initiator="system")
            await self._release(held)
            return
        self.calls[held.meta_call_id] = held
        if self.handoff is not None:
            await self.handoff.hold(held.meta_call_id)
        timer = asyncio.create_task(self._ring(held), name=f"ring {call.id}")
        try:
            waiting: asyncio.Future[Any] = asyncio.ensure_future(held.over.wait())
            answer: asyncio.Future[Any] = held.sdp_answer
            await asyncio.wait({answer, waiting}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            if held.sdp_answer.done() and not held.over.is_set():
                try:
                    await connection.pc.setRemoteDescription(
                        _description(held.sdp_answer.result(), "answer")
                    )
                    self._build(held)
                except Exception:
                    log.exception("call %s: Meta's answer could not be taken", call.id)
                    bridge.end_now("runtime_error", initiator="system")
                    await self._release(held)
                    return
                if held.accepted:
                    await bridge.answered()
                await self.run_call(self, held)
            else:
                await self._release(held)
        finally:
            timer.cancel()

    async def _ring(self, held: WhatsAppCall) -> None:
        """Give up a call nobody answered in no_answer_s."""
        await asyncio.sleep(self.no_answer_s)
        if held.accepted or held.over.is_set():
            return
        log.info("call %s: no answer in %.0f s", held.bridge.call.id, self.no_answer_s)
        assert held.meta_call_id is not None
        await self._graph_quietly(self.graph.terminate(held.number, held.meta_call_id))
        held.terminated = True
        held.bridge.end_now("no_answer", initiator="system")
        await self._stop_call(held)

    # -- running a call -------------------------------------------------------------------------

    def _bridge(self, call: Call, session: Session, started: float, *, inbound: bool) -> CallBridge:
        return CallBridge(
            self.client,
            call,
            session,
            options=self.options,
            features=self.features,
            started=started,
        )

    async def _hold(self, held: WhatsAppCall) -> None:
        for key in held.keys:
            self.calls[key] = held
        if self.handoff is not None:
            await self.handoff.hold(*held.keys)

    def _build(self, held: WhatsAppCall) -> None:
        """The call's pipeline on its connection: audio both ways (silence when the agent is
        quiet), the services the factory makes for it."""
        transport = SmallWebRTCTransport(
            webrtc_connection=held.connection,
            params=TransportParams(audio_in_enabled=True, audio_out_enabled=True),
        )
        bridge = held.bridge
        worker = bridge.build_worker(
            transport,
            self.services(bridge.call, bridge.session),
            params=PipelineParams(enable_metrics=True, enable_usage_metrics=True),
        )
        held.worker = worker

        @transport.event_handler("on_client_connected")
        async def on_connected(_transport: Any, _client: Any) -> None:
            if held.direction == "inbound":
                await bridge.answered()

        @transport.event_handler("on_client_disconnected")
        async def on_disconnected(_transport: Any, _client: Any) -> None:
            if held.direction == "outbound" and not held.accepted:
                bridge.end_now("no_answer", initiator="callee")
            else:
                await bridge.caller_hung_up()
            await self._stop_call(held)

    async def converse(self, held: WhatsAppCall) -> None:
        """Run the call's pipeline until it ends, then end the call everywhere."""
        assert held.worker is not None
        try:
            if not held.over.is_set():
                runner = WorkerRunner(handle_sigint=False)
                await runner.add_workers(held.worker)
                await runner.run()
        except Exception:
            log.exception("call %s failed in the runtime", held.bridge.call.id)
            held.bridge.end_now("runtime_error", initiator="system")
        finally:
            await self._release(held)

    async def _release(self, held: WhatsAppCall) -> None:
        """After the call: Graph terminate unless Meta ended it, the connection closed, the
        call no longer held, and its end reported."""
        held.over.set()
        if not held.terminated and held.meta_call_id:
            await self._graph_quietly(self.graph.terminate(held.number, held.meta_call_id))
        held.terminated = True
        with contextlib.suppress(Exception):
            await held.connection.disconnect()
        for key in held.keys:
            if self.calls.get(key) is held:
                del self.calls[key]
        if self.handoff is not None:
            await self.handoff.release(*held.keys)
        telephony = 0.0
        prices = self.options.prices
        if prices is not None and held.direction == "outbound" and held.accepted:
            talk = held.meta_duration
            if talk is None and held.bridge.answered_mono is not None:
                talk = int(time.monotonic() - held.bridge.answered_mono)
            telephony = math.ceil((talk or 0) / PULSE_S) * prices.whatsapp_per_pulse
        if not await held.bridge.finish(
            talk_time_seconds=held.meta_duration,
            telephony_cost=telephony,
            metadata={"whatsapp": {"callId": held.meta_call_id, "direction": held.direction}},
        ):
            log.error("call %s: some of its reports never reached the service", held.bridge.call.id)

    async def _graph_quietly(self, request: Awaitable[None]) -> None:
        try:
            await request
        except GraphError as exc:
            log.warning("Graph: %s", exc)


def _description(sdp: str, kind: str) -> Any:
    from aiortc import RTCSessionDescription

    return RTCSessionDescription(sdp=sdp, type=kind)
