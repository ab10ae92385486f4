"""A real HTTP receiver on 127.0.0.1 for the tests: records requests, answers as told."""

import http.server
import json
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
