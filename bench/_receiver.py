"""A local HTTP receiver for the benches, run as its own process: answers every request 200
with {"ok": true} and notes when each webhook event (X-Service-Event-Id) arrived.

GET /_stats answers {"count": N, "received": {key: unix_seconds}}, keyed by event id and by
"event/callId" for events about a call.
Usage: python bench/_receiver.py PORT
"""

import http.server
import json
import sys
import threading
import time

received: dict[str, float] = {}
count = [0]
lock = threading.Lock()
ANSWER = b'{"ok": true}'


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        arrived = time.time()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        event_id = self.headers.get("X-Service-Event-Id")
        keys = []
        if event_id:
            event = json.loads(body)
            keys = [event_id, f"{event['event']}/{event['data'].get('callId')}"]
        with lock:
            count[0] += 1
            for key in keys:
                received.setdefault(key, arrived)
        self.answer(ANSWER)

    def do_GET(self) -> None:
        if self.path == "/_stats":
            with lock:
                body = json.dumps({"count": count[0], "received": received}).encode()
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


if __name__ == "__main__":
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    server.serve_forever()
