"""A local HTTP receiver for the benches, run as its own process: answers every request 200
with {"ok": true} (after DELAY_MS when given: a tenant's function endpoint) and notes when
each webhook event (X-Service-Event-Id) arrived.

GET /_stats answers {"count": N, "received": {key: unix_seconds}}, keyed by event id and by
"event/callId" for events about a call.
GET /_deliveries?from=N answers the deliveries received (X-Service-Delivery-Id), in order of
arrival from the Nth on, each [path, event, callId, event timestamp, unix_seconds arrived].
Usage: python bench/_receiver.py PORT [DELAY_MS]
"""

import http.server
import json
import sys
import threading
import time
from urllib.parse import parse_qs, urlsplit

received: dict[str, float] = {}
deliveries: list[list[object]] = []
seen_deliveries: set[str] = set()
count = [0]
lock = threading.Lock()
ANSWER = b'{"ok": true}'
DELAY_S = int(sys.argv[2]) / 1000 if len(sys.argv) > 2 else 0.0


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        arrived = time.time()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        event_id = self.headers.get("X-Service-Event-Id")
        delivery_id = self.headers.get("X-Service-Delivery-Id")
        keys = []
        delivery = None
        if event_id:
            event = json.loads(body)
            call_id = event["data"].get("callId")
            keys = [event_id, f"{event['event']}/{call_id}"]
            delivery = [self.path, event["event"], call_id, event["timestamp"], arrived]
        with lock:
            count[0] += 1
            for key in keys:
                received.setdefault(key, arrived)
            if delivery and delivery_id not in seen_deliveries:  # a retry is not a new one
                seen_deliveries.add(delivery_id)
                deliveries.append(delivery)
        if DELAY_S:
            time.sleep(max(0.0, arrived + DELAY_S - time.time()))
        self.answer(ANSWER)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/_stats":
            with lock:
                body = json.dumps({"count": count[0], "received": received}).encode()
            self.answer(body)
        elif url.path == "/_deliveries":
            start = int(parse_qs(url.query).get("from", ["0"])[0])
            with lock:
                body = json.dumps(deliveries[start:]).encode()
            self.answer(body)
        else:
            self.do_POST()

    def answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # a burst of new connections is not dropped (and retried in 1 s)


if __name__ == "__main__":
    Server(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
