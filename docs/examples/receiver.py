"""A stand-in for your own systems while you try the service: it answers an agent's function
calls with free appointment slots and takes webhook deliveries, checks the signature of each
request, and prints one line for each.

    python3 docs/examples/receiver.py 8001 a-long-random-secret

Only the standard library; serves http://127.0.0.1:PORT until stopped.
"""

import hashlib
import hmac
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver(BaseHTTPRequestHandler):
    secret = b""

    def do_GET(self) -> None:
        self.answer({"receiver": "listening"})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        expected = "sha256=" + hmac.new(self.secret, body, hashlib.sha256).hexdigest()
        signed = hmac.compare_digest(expected, self.headers.get("X-Service-Signature", ""))
        signature = "signature ok" if signed else "BAD SIGNATURE"
        payload = json.loads(body)
        if "functionName" in payload:  # an agent's function, called mid-call
            parameters = json.dumps(payload["parameters"])
            print(f"receiver: {payload['functionName']} {parameters} ({signature})", flush=True)
            self.answer({"slots": ["10:00", "14:30"]})
        else:  # a webhook delivery
            print(f"receiver: {payload['event']} {payload['id']} ({signature})", flush=True)
            self.answer({})

    def answer(self, document: dict) -> None:
        body = json.dumps(document).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per request is printed above


if __name__ == "__main__":
    port, Receiver.secret = int(sys.argv[1]), sys.argv[2].encode()
    ThreadingHTTPServer(("127.0.0.1", port), Receiver).serve_forever()
