"""Where a browser call's media may go: the addresses the bot serves on, and nowhere else."""

import asyncio

import aioice.ice
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection

from tests.bridge.browser import candidates
from voiceagent_bridge.webrtc import gather_candidates_on, serving_addresses


@pytest.fixture
def host_addresses(monkeypatch):
    """aioice's list of host addresses, put back after the test."""
    monkeypatch.setattr(aioice.ice, "get_host_addresses", aioice.ice.get_host_addresses)


def test_the_media_goes_where_the_bot_listens():
    assert serving_addresses("127.0.0.1") == ["127.0.0.1"]
    assert "127.0.0.1" in serving_addresses("localhost")
    assert serving_addresses("0.0.0.0") is None and serving_addresses("::") is None


def test_gathering_offers_the_chosen_addresses_only(host_addresses):
    gather_candidates_on(["127.0.0.1", "::1"])
    assert aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=False) == ["127.0.0.1"]
    assert aioice.ice.get_host_addresses(use_ipv4=False, use_ipv6=True) == ["::1"]

    async def offer() -> str:
        # Gathering binds its sockets and sends nothing: no STUN server, no peer yet.
        peer = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        try:
            peer.addTransceiver("audio")
            await peer.setLocalDescription(await peer.createOffer())
            return peer.localDescription.sdp
        finally:
            await peer.close()

    gather_candidates_on(["127.0.0.1"])
    assert set(candidates(asyncio.run(offer()))) == {("127.0.0.1", "host")}
