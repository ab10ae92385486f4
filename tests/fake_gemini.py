"""Gemini's generateContent on 127.0.0.1 for the tests (real HTTP): it answers with JSON built
from the request's own responseSchema (every property of the schema, each a value of its
type: the first of an enum's choices), in Gemini's answer shape with usageMetadata; scripted
answers (malformed JSON, a wrong type, a 429, a 500, a slow answer) are served first, in order.
Every request is recorded with its API key."""

import json
import threading
from collections import deque
from typing import Any

from tests.receiver import Answer, Received, Receiver

API_KEY = "test-gemini-key"
PROMPT_TOKENS = 1200
OUTPUT_TOKENS = 150


def value_for(schema: dict[str, Any], name: str = "") -> Any:
    """A value of the schema's type (OpenAPI's subset as Gemini takes it)."""
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "OBJECT":
        return {key: value_for(sub, key) for key, sub in schema.get("properties", {}).items()}
    if kind == "NUMBER":
        return 42.5
    if kind == "INTEGER":
        return 42
    if kind == "BOOLEAN":
        return True
    if kind == "ARRAY":
        return [value_for(schema.get("items", {"type": "STRING"}))]
    return f"{name or 'text'} from the call"


class FakeGemini:
    """The stand-in. `url` is what GEMINI_API_URL points at. State (reset by reset()): the
    scripted answers still to serve, and `override`, values merged into the answer built from
    the schema (a field's value, say) for every request that has no scripted answer."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.receiver = Receiver(self.answer)
        self.url = self.receiver.url
        self.reset()

    def __enter__(self) -> "FakeGemini":
        self.receiver.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.receiver.__exit__(*exc)

    def reset(self) -> None:
        with self.lock:
            self.script: deque[tuple[str, Any]] = deque()
            self.override: dict[str, Any] = {}
            self.receiver.requests.clear()

    # What the tests script.

    def then(self, kind: str, value: Any = None) -> "FakeGemini":
        """Serve this answer to the next request not yet scripted: "malformed" (text that is
        not JSON), "wrong" (the answer with value, a dict, merged into its fields), "status"
        (that HTTP status with Gemini's error body), "slow" (the built answer after value
        seconds)."""
        with self.lock:
            self.script.append((kind, value))
        return self

    @property
    def requests(self) -> list[Received]:
        with self.receiver.lock:
            return list(self.receiver.requests)

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:
        return self.receiver.wait_for(count, timeout)

    # The server.

    def answer(self, request: Received) -> Answer:
        if request.method != "POST" or not request.path.endswith(":generateContent"):
            return self.error(404, "NOT_FOUND", "Unknown method.")
        if request.headers.get("x-goog-api-key") != API_KEY:
            return self.error(400, "INVALID_ARGUMENT", "API key not valid.")
        schema = request.json()["generationConfig"]["responseSchema"]
        built = value_for(schema)
        with self.lock:
            kind, value = self.script.popleft() if self.script else ("built", None)
            override = dict(self.override)
        if kind == "status":
            return self.error(value, "RESOURCE_EXHAUSTED" if value == 429 else "INTERNAL", "No.")
        if kind == "malformed":
            return self.candidate('{"summary": "cut sho')
        if kind == "wrong":
            built["fields"] = {**built.get("fields", {}), **value}
        for key, given in override.items():
            if key == "fields":
                built["fields"] = {**built.get("fields", {}), **given}
            else:
                built[key] = given
        answer = self.candidate(json.dumps(built))
        if kind == "slow":
            answer.delay = value
        return answer

    @staticmethod
    def candidate(text: str) -> Answer:
        body = {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": text}]},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": PROMPT_TOKENS,
                "candidatesTokenCount": OUTPUT_TOKENS,
                "totalTokenCount": PROMPT_TOKENS + OUTPUT_TOKENS,
            },
            "modelVersion": "gemini-2.5-flash",
        }
        return Answer(
            status=200, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )

    @staticmethod
    def error(status: int, code: str, message: str) -> Answer:
        body = {"error": {"code": status, "message": message, "status": code}}
        return Answer(
            status=status,
            body=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
