"""Calls from a browser over WebRTC (Pipecat's SmallWebRTC), for a voice runtime of the service.

A `BrowserLine` is a bot's side of them: for a browser's offer it answers the offer, starts a
call with the service to one of the tenant's numbers (from a fixed caller number, as no
telephone is involved), and gives Pipecat the connection's transport. `gather_candidates_on`
keeps a call's media on the addresses the bot serves on.
"""

import ipaddress
import logging
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import aioice.ice
from pipecat.transports.base_transport import TransportParams
from pipecat.transports.smallwebrtc.connection import SmallWebRTCConnection
from pipecat.transports.smallwebrtc.transport import SmallWebRTCTransport

from voiceagent_bridge.bridge import CallBridge, ServiceFeatures
from voiceagent_bridge.client import Call, RuntimeAPIError, RuntimeClient, Session

log = logging.getLogger(__name__)

OFFER_PATH = "/api/offer"  # where a browser posts its offer, as Pipecat's runner has it
# The caller's number of a browser's calls: the one `flask calls simulate` uses.
BROWSER_CALLER = "+6281234567890"


# -- where the media goes -----------------------------------------------------------------------


def serving_addresses(host: str) -> list[str] | None:
    """The addresses of a host the bot serves on; None for every interface (0.0.0.0, ::)."""
    try:
        if ipaddress.ip_address(host).is_unspecified:
            return None
        return [host]
    except ValueError:  # a name, such as localhost
        return sorted(
            {str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)}
        )


def gather_candidates_on(addresses: Sequence[str]) -> None:
    """Offer WebRTC peers host candidates on these addresses only, for the whole process.

    aioice (aiortc's ICE) gathers a host candidate on every interface but loopback, and has
    no setting to choose them (its Connection takes only use_ipv4 and use_ipv6): its list of
    the host's addresses is replaced. With no STUN or TURN server (the bot sets none), a
    call's media then goes only to and from these addresses.
    """
    chosen = list(addresses)

    def host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        return [
            address
            for address in chosen
            if (use_ipv6 if ipaddress.ip_address(address).version == 6 else use_ipv4)
        ]

    aioice.ice.get_host_addresses = host_addresses


# -- the calls ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrowserCall:
    """A browser's WebRTC connection, answered, and the call it carries."""

    connection: SmallWebRTCConnection
    call: Call
    session: Session
    started: float  # time.monotonic() when the offer reached the bot

    def answer(self) -> dict[str, str]:
        """The SDP answer for the browser, with the call's id."""
        answer = self.connection.get_answer()
        assert answer is not None  # initialize() made it
        return {**answer, "call_id": self.call.id}


@dataclass
class BrowserLine:
    """A bot's calls from browsers: its client of the service (and what it learned of the
    service), the caller's number they carry, their open connections and the calls in
    progress (by call id)."""

    client: RuntimeClient
    caller_number: str = BROWSER_CALLER
    features: ServiceFeatures = field(default_factory=ServiceFeatures)
    connections: dict[str, SmallWebRTCConnection] = field(default_factory=dict)
    active: dict[str, CallBridge] = field(default_factory=dict)

    async def accept(
        self, sdp: str, kind: str, *, did: str, variables: Mapping[str, str] | None = None
    ) -> BrowserCall:
        """A browser's offer (sdp, of type kind) to call did: answer it, then start its call
        with the service. Raises ValueError for an offer that cannot be answered (no call is
        started), and the service's RuntimeAPIError when it turns the call away (CallRejected
        for no_agent, no_credits or concurrency_limit); the connection is closed then."""
        started = time.monotonic()
        # No ICE server: the bot offers its host candidates only (see gather_candidates_on).
        connection = SmallWebRTCConnection(ice_servers=[])
        try:
            await connection.initialize(sdp=sdp, type=kind)
            # Pipecat takes the first transceiver for the caller's audio; an offer without
            # one would never connect, and its call would ring on.
            transceivers = connection.pc.getTransceivers()
            if not transceivers or transceivers[0].kind != "audio":
                raise ValueError("it offers no audio first")
        except Exception as exc:
            await connection.disconnect()
            raise ValueError(f"The offer could not be answered: {exc}") from exc
        try:
            begun = await self.client.start_call(
                did=did,
                caller_number=self.caller_number,
                provider_call_id=f"webrtc-{uuid.uuid4().hex}",
                variables=variables,
            )
        except RuntimeAPIError:
            await connection.disconnect()
            raise
        self.connections[connection.pc_id] = connection

        @connection.event_handler("closed")
        async def on_closed(closed: SmallWebRTCConnection) -> None:
            self.connections.pop(closed.pc_id, None)

        return BrowserCall(connection, begun.call, begun.session, started)

    def transport(self, browser_call: BrowserCall) -> SmallWebRTCTransport:
        """Pipecat's transport of the call's connection: its audio both ways."""
        return SmallWebRTCTransport(
            webrtc_connection=browser_call.connection,
            params=TransportParams(audio_in_enabled=True, audio_out_enabled=True),
        )

    async def close(self) -> None:
        """The bot is stopping: end the calls in progress, and close every connection."""
        for bridge in self.active.values():
            bridge.end_now("runtime_stopped", initiator="system")
        for connection in list(self.connections.values()):
            await connection.disconnect()
        self.connections.clear()
