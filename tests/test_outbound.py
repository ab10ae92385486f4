"""The outbound sender: SSRF guard on the connected address, no redirects or proxies, caps."""

import ipaddress
import socket
import ssl
import subprocess
import threading
import time

import pytest

from app.outbound import client, policy
from app.outbound.errors import (
    BlockedAddress,
    OutboundConnectionError,
    OutboundError,
    OutboundTimeout,
    UnsafeURL,
)
from tests.receiver import Answer, Receiver, Trickler

BLOCKED = [
    "127.0.0.1",
    "127.8.9.10",
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "100.64.0.1",
    "169.254.169.254",
    "0.0.0.0",
    "224.0.0.1",
    "240.0.0.1",
    "255.255.255.255",
    "::",
    "::1",
    "fd00::1",
    "fe80::1",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "::127.0.0.1",
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    "64:ff9b:1::a00:1",  # local-use NAT64
]
PUBLIC = ["93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "2002:808:808::1"]


def fixed(*addresses):
    """A resolver that answers every name with these addresses."""
    return lambda host, port: list(addresses)


@pytest.mark.parametrize("address", BLOCKED)
def test_is_blocked_refuses_internal_addresses(address):
    assert policy.is_blocked(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_is_blocked_admits_public_addresses(address):
    assert not policy.is_blocked(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/hook",
        "https://10.0.0.1/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/hook",
        "https://[::ffff:127.0.0.1]/hook",
        "https://[::ffff:7f00:1]:8443/hook",
    ],
)
def test_check_url_refuses_blocked_literals(url):
    with pytest.raises(BlockedAddress):
        policy.check_url(url, allow_private=False)


@pytest.mark.parametrize(
    "url, message",
    [
        ("http://hooks.example.com/in", "https://"),
        ("ftp://hooks.example.com/in", "https://"),
        ("https://user:pass@hooks.example.com/in", "user name"),
        ("https://user@hooks.example.com/in", "user name"),
        ("https:///in", "no host"),
        ("https://hooks.example.com/" + "a" * 2048, "2048"),
        ("https://hooks.example.com/a b", "spaces"),
        ("https://hooks.example.com:99999/", "not valid"),
    ],
)
def test_check_url_refuses_bad_urls(url, message):
    with pytest.raises(UnsafeURL, match=message):
        policy.check_url(url, allow_private=False)


def test_registration_answers_alike_for_a_name_resolving_internally_and_one_that_does_not(
    monkeypatch,
):
    """Registration tells nothing of what the service's resolver answers: a name resolving to
    a blocked address, one that does not resolve and a public one are all accepted, without a
    lookup; the sender refuses the first two on every attempt, with one and the same reason."""
    looked_up = []
    answers = {"internal.example.com": "10.1.2.3", "hooks.example.com": "93.184.216.34"}

    def getaddrinfo(host, port, *args, **kwargs):
        looked_up.append(host)
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[host], port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    for host in ("internal.example.com", "nowhere.example.com", "hooks.example.com"):
        policy.check_url(f"https://{host}/in", allow_private=False)
    assert looked_up == []
    sender = client.Sender(allow_private=False)
    reasons = []
    for host in ("internal.example.com", "nowhere.example.com"):
        with pytest.raises(OutboundError) as refused:
            sender.send("POST", f"https://{host}/in", timeout=(3, 5))
        reasons.append(str(refused.value))
    assert reasons == [policy.NO_PUBLIC_ADDRESS] * 2


# Hosts no request can be sent to; names under .test never resolve anywhere.
NOT_HOST_NAMES = [
    "https://a..b/h",  # an empty label
    "https://.hooks.test/h",
    "https://" + "a" * 64 + ".test/h",  # a label over 63 characters
    "https://" + ".".join(["a" * 63] * 4) + ".test/h",  # a name over 253 characters
    "https://\u2603.test/h",  # U+2603 is not allowed in IDNA 2008
    "https://a\u200db.test/h",  # a zero width joiner outside its context
    "https://xn--/h",  # an empty punycode label
    "https://hooks.xn--.test/h",
    "https://xn--a.test/h",  # decodes to U+0080, no character of a name
    "https://xn--zz-zz.test/h",  # not punycode at all
    "https://xn--n3h.test/h",  # U+2603 again, written as its A-label
    "https://XN--.test/h",  # the prefix in capitals
]


@pytest.fixture
def no_network(monkeypatch):
    """Fail the test on any name lookup or connection attempt."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network activity: {args}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.mark.parametrize("allow_private", [False, True])
@pytest.mark.parametrize("url", NOT_HOST_NAMES)
def test_check_url_refuses_a_host_that_is_no_host_name(no_network, url, allow_private):
    with pytest.raises(UnsafeURL, match="not a valid host name"):
        policy.check_url(url, allow_private=allow_private)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.test./in",  # the root's trailing dot
        "https://" + "a" * 63 + ".test/in",
        "https://" + ".".join(["a" * 63] * 3 + ["a" * 56]) + ".test/in",  # 253 characters
        "https://b\u00fccher.test/in",  # encoded as xn--bcher-kva.test
        "https://xn--bcher-kva.test/in",  # the same, as sent
        "https://[2001:db8::1]:8443/in",
        "http://127.0.0.1:5000/in",
    ],
)
def test_check_url_admits_valid_host_names_and_ip_literals(no_network, url):
    policy.check_url(url, allow_private=True)


@pytest.mark.parametrize(
    "url, host",
    [
        ("https://b\u00fccher.test/in", "xn--bcher-kva.test"),  # IDNA, as urllib3 encodes it
        ("https://B\u00dcCHER.test/in", "xn--bcher-kva.test"),
        ("https://Hooks.Example.TEST./in", "hooks.example.test"),  # the root's dot dropped
        ("https://%31%32%37.0.0.1/in", "127.0.0.1"),  # urllib3 decodes unreserved escapes
        ("https://127%2e0%2e0%2e1:8443/in", "127.0.0.1"),
        ("https://127.0.0.1./in", "127.0.0.1"),
        ("https://loc%61lhost./in", "localhost"),
        ("https://[::1]/in", "::1"),
    ],
)
def test_target_host_is_the_host_the_sender_resolves(no_network, url, host):
    assert policy.target_host(url) == host


# Hosts written so that the name the sender resolves, or the address it connects to, is not
# the text between // and the port: all of them lead to 127.0.0.1.
LOOPBACK_SPELLINGS = [
    "localhost.",  # a name resolving to loopback, with the root's trailing dot
    "LocalHost.",
    "127.0.0.1.",
    "%31%32%37.0.0.1",
    "127%2e0%2e0%2e1",
    "loc%61lhost",
]
# Hosts the sender (requests, through urllib3) cannot send to at all: IDNA 2008 without the
# UTS 46 mapping refuses full-width letters, circled digits and ideographic full stops.
UNSENDABLE_HOSTS = [
    "\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54",  # full-width localhost
    "\u2460\u2461\u2466.0.0.1",  # circled 1, 2, 7
    "127\u30020\u30020\u30021",  # ideographic full stops
    "%",
]


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_check_url_refuses_loopback_however_it_is_written(host):
    with pytest.raises(BlockedAddress, match="a private or reserved address"):
        policy.check_url(f"https://{host}/in", allow_private=False)


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_sender_refuses_loopback_however_it_is_written(host):
    with Receiver() as receiver:
        url = f"https://{host}:{receiver.port}/in"
        with pytest.raises(BlockedAddress, match="a private or reserved address"):
            client.Sender(allow_private=False).send("POST", url, timeout=(3, 5))
    assert receiver.requests == []


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_what_the_check_admits_the_sender_delivers_to_the_vetted_address(host):
    with Receiver() as receiver:
        url = f"http://{host}:{receiver.port}/in"
        policy.check_url(url, allow_private=True)
        response = client.Sender(allow_private=True).send("POST", url, timeout=(3, 5))
        assert response.status_code == 200
    [request] = receiver.requests
    assert request.path == "/in"


@pytest.mark.parametrize("allow_private", [False, True])
@pytest.mark.parametrize("host", UNSENDABLE_HOSTS)
def test_check_url_refuses_a_host_the_sender_cannot_send_to(no_network, host, allow_private):
    with pytest.raises(UnsafeURL, match="not a valid host name"):
        policy.check_url(f"https://{host}/in", allow_private=allow_private)
    with pytest.raises(UnsafeURL, match="not a valid host name"):
        client.Sender(allow_private=True).send("POST", f"https://{host}/in", timeout=(3, 5))


def test_check_url_with_private_allowed_admits_http_and_loopback():
    policy.check_url("http://127.0.0.1:5000/in", allow_private=True)
    with pytest.raises(UnsafeURL):
        policy.check_url("ftp://127.0.0.1/in", allow_private=True)


def test_sender_connects_to_the_vetted_address_and_keeps_the_host_name():
    with Receiver() as receiver:
        sender = client.Sender(allow_private=True, resolver=fixed("127.0.0.1"))
        response = sender.send(
            "POST", f"http://hooks.example.com:{receiver.port}/in", body=b"{}", timeout=(3, 5)
        )
        assert response.status_code == 200 and response.body == b"ok"
        [request] = receiver.requests
        assert request.headers["Host"] == f"hooks.example.com:{receiver.port}"
        assert request.headers["User-Agent"].startswith("VoiceAgentAPI/")


def test_sender_vets_every_request_and_keeps_the_connection_alive(monkeypatch):
    looked_up, connected = [], []
    connect = socket.socket.connect

    def counting_connect(sock, address):
        connected.append(address)
        return connect(sock, address)

    def resolver(host, port):
        looked_up.append(host)
        return ["127.0.0.1"]

    monkeypatch.setattr(socket.socket, "connect", counting_connect)
    answers = iter([Answer(), Answer(), Answer(headers={"Connection": "close"}), Answer()])
    with Receiver(lambda request: next(answers)) as receiver:
        sender = client.Sender(allow_private=True, resolver=resolver)
        url = f"http://hooks.example.com:{receiver.port}/in"
        for _ in range(4):
            assert sender.send("POST", url, body=b"{}", timeout=(3, 5)).status_code == 200
    assert looked_up == ["hooks.example.com"] * 4  # resolved and vetted for every request
    assert connected == [("127.0.0.1", receiver.port)] * 2  # three on one connection, then one
    assert client.sender(True) is client.sender(True)  # one per process and policy


def test_sender_refuses_a_name_resolving_to_loopback_before_connecting():
    with Receiver() as receiver:
        sender = client.Sender(allow_private=False, resolver=fixed("127.0.0.1"))
        with pytest.raises(BlockedAddress):
            sender.send("POST", f"https://hooks.example.com:{receiver.port}/in", timeout=(3, 5))
        assert receiver.requests == []


def test_sender_refuses_when_any_resolved_address_is_blocked():
    sender = client.Sender(allow_private=False, resolver=fixed("93.184.216.34", "10.0.0.1"))
    with pytest.raises(BlockedAddress, match="does not resolve to a public address"):
        sender.send("POST", "https://hooks.example.com/in", timeout=(3, 5))


@pytest.mark.parametrize("url", NOT_HOST_NAMES)
def test_sender_refuses_a_host_that_is_no_host_name_before_any_lookup(no_network, url):
    looked_up = []
    sender = client.Sender(allow_private=True, resolver=lambda host, port: looked_up.append(host))
    with pytest.raises(UnsafeURL, match="not a valid host name"):
        sender.send("POST", url, body=b"{}", timeout=(3, 5))
    assert looked_up == []


def test_guard_refuses_a_host_that_is_no_host_name_without_resolving(no_network):
    guard = policy.AddressGuard(allow_private=True, resolver=fixed("127.0.0.1"))
    with pytest.raises(UnsafeURL, match="not a valid host name"):
        guard.addresses("a..b", 443)


@pytest.mark.parametrize(
    "error", [UnicodeError("label empty or too long"), ValueError("embedded null character")]
)
def test_sender_reports_a_resolver_error_as_an_outbound_error(error):
    def resolver(host, port):
        raise error

    sender = client.Sender(allow_private=True, resolver=resolver)
    with pytest.raises(UnsafeURL, match="cannot be resolved"):
        sender.send("POST", "https://hooks.example.test/in", timeout=(3, 5))


def test_sender_reports_an_answer_that_is_no_address_as_an_outbound_error():
    sender = client.Sender(allow_private=False, resolver=fixed("not-an-address"))
    with pytest.raises(UnsafeURL, match="cannot be resolved"):
        sender.send("POST", "https://hooks.example.test/in", timeout=(3, 5))


def test_sender_checks_the_answer_at_connect_time_not_before():
    """A name that looked public when registered and resolves to loopback now is refused."""
    answers = iter([["93.184.216.34"], ["127.0.0.1"]])
    sender = client.Sender(allow_private=False, resolver=lambda host, port: next(answers))
    sender.guard.addresses("rebind.example.com", 443)  # the check made at registration
    with pytest.raises(BlockedAddress, match="does not resolve to a public address"):
        sender.send("POST", "https://rebind.example.com/in", timeout=(3, 5))


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/in",
        "https://10.0.0.1/in",
        "https://169.254.169.254/in",
        "https://[::1]/in",
        "https://[::ffff:127.0.0.1]/in",
        "http://127.0.0.1/in",
    ],
)
def test_sender_refuses_blocked_literals(url):
    with pytest.raises(UnsafeURL):
        client.Sender(allow_private=False).send("POST", url, timeout=(3, 5))


def test_sender_does_not_follow_redirects():
    def answer(request):
        if request.path == "/in":
            return Answer(302, headers={"Location": "/elsewhere"})
        return Answer()

    with Receiver(answer) as receiver:
        response = client.Sender(allow_private=True).send(
            "POST", receiver.url + "/in", body=b"{}", timeout=(3, 5)
        )
    assert response.status_code == 302
    assert [request.path for request in receiver.requests] == ["/in"]


def test_sender_ignores_proxy_environment(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    with Receiver() as receiver:
        response = client.Sender(allow_private=True).send(
            "POST", receiver.url, body=b"{}", timeout=(3, 5)
        )
    assert response.status_code == 200


def test_sender_caps_the_response_read():
    with Receiver(lambda request: Answer(body=b"x" * 300_000)) as receiver:
        response = client.Sender(allow_private=True).send("GET", receiver.url, timeout=(3, 5))
    assert len(response.body) == client.MAX_RESPONSE_BYTES and response.truncated


def test_sender_times_out_on_a_slow_receiver():
    with Receiver(lambda request: Answer(delay=1.0)) as receiver:
        with pytest.raises(OutboundTimeout):
            client.Sender(allow_private=True).send("POST", receiver.url, timeout=(1, 0.2))


@pytest.mark.parametrize("trickle_head", [False, True], ids=["body", "headers"])
def test_sender_cuts_off_a_trickling_answer_on_the_clock(trickle_head):
    """Each byte arrives well within a socket timeout, but the answer never ends: the
    exchange is over when its time is, not after each read."""
    with Trickler(interval=0.05, trickle_head=trickle_head) as trickler:
        started = time.monotonic()
        with pytest.raises(OutboundTimeout, match="did not answer in time"):
            client.Sender(allow_private=True).send("POST", trickler.url, timeout=(1, 0.5))
        elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 0.7
    assert trickler.count() == 1


def test_sender_keeps_the_connection_of_an_answer_in_time_after_its_deadline():
    """A deadline that has passed never touches a connection that went back to the pool."""
    with Receiver() as receiver:
        sender = client.Sender(allow_private=True)
        assert sender.send("POST", receiver.url, timeout=(1, 0.2)).status_code == 200
        time.sleep(0.3)
        assert sender.send("POST", receiver.url, timeout=(1, 0.2)).status_code == 200


def test_requests_share_one_deadline_thread_and_a_sooner_deadline_still_ends_on_time():
    """No thread per request: one thread per process keeps every request's deadline, and a
    request due sooner than the ones it already waits for is cut off at its own time."""
    with Receiver() as fast, Trickler(interval=0.05) as trickler:
        sender = client.Sender(allow_private=True)
        for _ in range(5):
            assert sender.send("POST", fast.url, timeout=(1, 30)).status_code == 200
        started = time.monotonic()
        with pytest.raises(OutboundTimeout):
            sender.send("POST", trickler.url, timeout=(1, 0.3))
        assert 0.3 <= time.monotonic() - started < 0.5
    names = [thread.name for thread in threading.enumerate()]
    assert names.count("deadlines") == 1


def test_sender_reports_a_refused_connection():
    with Receiver() as receiver:
        url = receiver.url
    with pytest.raises(OutboundConnectionError, match="refused"):
        client.Sender(allow_private=True).send("POST", url, timeout=(1, 1))


def test_errors_share_one_base():
    for error in (
        UnsafeURL,
        BlockedAddress,
        OutboundTimeout,
        OutboundConnectionError,
    ):
        assert issubclass(error, OutboundError)


@pytest.fixture
def tls_certificate(tmp_path):
    """A self-signed certificate for hooks.example.com, made with the openssl command."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=hooks.example.com",
            "-addext", "subjectAltName=DNS:hooks.example.com",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


def test_tls_verifies_the_host_name_while_connecting_to_the_pinned_address(tls_certificate):
    cert, key = tls_certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server_names = []
    context.sni_callback = lambda sock, name, ctx: server_names.append(name)
    with Receiver() as receiver:
        receiver.server.socket = context.wrap_socket(receiver.server.socket, server_side=True)
        sender = client.Sender(allow_private=True, resolver=fixed("127.0.0.1"), verify=str(cert))
        response = sender.send("GET", f"https://hooks.example.com:{receiver.port}/", timeout=(3, 5))
        assert response.status_code == 200
        assert server_names == ["hooks.example.com"]
        other = client.Sender(allow_private=True, resolver=fixed("127.0.0.1"), verify=str(cert))
        with pytest.raises(OutboundConnectionError, match="TLS"):
            other.send("GET", f"https://other.example.com:{receiver.port}/", timeout=(3, 5))


def test_guarded_adapter_has_no_way_to_a_pool_around_the_guard():
    adapter = client.Sender(allow_private=False).session.get_adapter("https://a.test/")
    with pytest.raises(OutboundError):
        adapter.get_connection("https://a.test/")


def test_sender_is_one_per_process_and_policy():
    assert client.sender(False) is client.sender(False)
    assert client.sender(True) is not client.sender(False)
    assert client.sender(False).session.trust_env is False


def test_guard_is_thread_safe_to_share():
    sender = client.Sender(allow_private=True)
    with Receiver() as receiver:
        results = []
        threads = [
            threading.Thread(
                target=lambda: results.append(
                    sender.send("GET", receiver.url, timeout=(3, 5)).status_code
                )
            )
            for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert results == [200] * 8
