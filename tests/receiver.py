"""A real HTTP receiver on 127.0.0.1 for the tests: records requests, answers as told."""

import http.server
import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)  # when it arrived

    def json(self):
        return json.loads(self.body)


@dataclass
class Answer:
    status: int = 200
    body: bytes = b"ok"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the sender died (a killed worker): nothing to report
        super().handle_error(request, client_address)


class Receiver:
    """A threaded HTTP server. `answer` decides each response from the request (default 200)."""

    def __init__(self, answer: Callable[[Received], Answer] | None = None, port: int = 0) -> None:
        self.requests: list[Received] = []
        self.answer = answer or (lambda request: Answer())
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # answer at once, not after a delayed ACK

            def handle_any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if len(body) < length:
                    return  # the sender died mid-request (a killed worker): nothing was sent
                request = Received(self.command, self.path, dict(self.headers), body)
                with receiver.lock:
                    receiver.requests.append(request)
                answer = receiver.answer(request)
                if answer.delay:
                    time.sleep(answer.delay)
                try:
                    self.send_response(answer.status)
                    for name, value in answer.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(answer.body)))
                    self.end_headers()
                    self.wfile.write(answer.body)
                except OSError:
                    pass  # the client gave up (a timeout test)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any

            def log_message(self, *args) -> None:
                pass

        self.server = Server(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> "Receiver":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def event_ids(self) -> set[str]:
        """The X-Service-Event-Id of every request so far (webhook deliveries)."""
        with self.lock:
            return {request.headers["X-Service-Event-Id"] for request in self.requests}

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:
        """The requests once at least `count` have arrived; fails after timeout seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            time.sleep(0.01)
        raise AssertionError(f"expected {count} requests, got {len(self.requests)}")


class Trickler:
    """A receiver that answers 200 at once with its headers, then sends its body one byte
    every `interval` seconds (or, with trickle_head, its status line and headers too): a
    hostile endpoint that holds whoever waits for the whole answer. Counts what it got."""

    def __init__(self, *, length: int = 600, interval: float = 1.0, trickle_head: bool = False):
        self.length, self.interval, self.trickle_head = length, interval, trickle_head
        self.requests: list[Received] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.accept, daemon=True)

    def __enter__(self) -> "Trickler":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.listener.close()

    def accept(self) -> None:
        while not self.stopping.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(connection,), daemon=True).start()

    def serve(self, connection: socket.socket) -> None:
        with connection:
            try:
                request = self.read_request(connection)
                if request is None:
                    return
                with self.lock:
                    self.requests.append(request)
                head = (
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {self.length}\r\n\r\n"
                ).encode()
                if not self.trickle_head:
                    connection.sendall(head)
                    head = b""
                for byte in head + b" " * self.length:
                    if self.stopping.wait(self.interval):
                        return
                    connection.sendall(bytes([byte]))
            except OSError:
                return  # the sender gave up: what the test wants

    @staticmethod
    def read_request(connection: socket.socket) -> Received | None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = connection.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        request_line, *lines = head.decode("latin-1").split("\r\n")
        method, path, _ = request_line.split(" ", 2)
        headers = dict(line.split(": ", 1) for line in lines)
        length = int(next((v for k, v in headers.items() if k.lower() == "content-length"), 0))
        while len(body) < length:
            chunk = connection.recv(65536)
            if not chunk:
                return None
            body += chunk
        return Received(method, path, headers, body)

    def count(self) -> int:
        with self.lock:
            return len(self.requests)
