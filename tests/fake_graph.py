"""Meta's Graph API on 127.0.0.1 for the tests (real HTTP): WhatsApp Business accounts with
their phone numbers in pages, users' call permissions, and messages; every request is recorded
with its bearer token, and failures are served on demand in Meta's own error shapes. The
calling endpoint (POST /{phone_number_id}/calls) is answered by whoever plays the users'
side of the calls (`on_calls`: the bridge's tests)."""

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.receiver import Answer, Received, Receiver

VERSION = "v23.0"

# Meta's error bodies, by name: (HTTP status, error object).
ERRORS: dict[str, tuple[int, dict[str, Any]]] = {
    "auth": (
        401,
        {
            "message": "Error validating access token: Session has expired.",
            "type": "OAuthException",
            "code": 190,
            "error_subcode": 463,
            "fbtrace_id": "Afake",
        },
    ),
    "rate": (
        400,
        {
            "message": "(#80007) There have been too many calls to this WhatsApp Business account.",
            "type": "OAuthException",
            "code": 80007,
            "fbtrace_id": "Afake",
        },
    ),
    "server": (
        500,
        {"message": "An unknown error occurred", "type": "OAuthException", "code": 1},
    ),
    "unknown_waba": (
        400,
        {
            "message": "Unsupported get request. Object with ID '1' does not exist.",
            "type": "GraphMethodException",
            "code": 100,
            "error_subcode": 33,
            "fbtrace_id": "Afake",
        },
    ),
    # Free-form text to a user outside the 24-hour customer-service window.
    "window_closed": (
        400,
        {
            "message": "(#131047) Re-engagement message",
            "type": "OAuthException",
            "code": 131047,
            "fbtrace_id": "Afake",
        },
    ),
    # The permission-request limit of one business and user pair (1 a day, 2 a week).
    "request_limit": (
        400,
        {
            "message": "(#138009) Call permission request limit reached",
            "type": "OAuthException",
            "code": 138009,
            "fbtrace_id": "Afake",
        },
    ),
}


@dataclass
class Waba:
    token: str | None  # None: any token is accepted
    numbers: list[dict[str, Any]] = field(default_factory=list)


class FakeGraph:
    """The stand-in. `url` is what WHATSAPP_GRAPH_URL points at. State (reset by reset()):
    wabas by id, permissions by (phone number id, user's digits) as Graph's
    call_permissions answer, messages sent, and `fail`: a Meta error name (ERRORS) or
    ("slow", seconds) to serve for requests with a given bearer token or path part."""

    def __init__(self, page_size: int = 2) -> None:
        self.page_size = page_size
        self.lock = threading.Lock()
        # POST /{phone_number_id}/calls, answered by the tests that set it (not reset).
        self.on_calls: Callable[[str, Received], Answer] | None = None
        self.receiver = Receiver(self.answer)
        self.url = f"{self.receiver.url}/{VERSION}"
        self.reset()

    def __enter__(self) -> "FakeGraph":
        self.receiver.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.receiver.__exit__(*exc)

    def reset(self) -> None:
        with self.lock:
            self.wabas: dict[str, Waba] = {}
            self.permissions: dict[tuple[str, str], dict[str, Any]] = {}
            self.messages: list[dict[str, Any]] = []
            self.fail: dict[str, Any] = {}
            self.next_link: str | None = None  # a paging.next to serve instead of our own
            # The account served for a WABA id not added (None: Meta's unknown-object error).
            self.any_waba: Waba | None = None
            self.receiver.requests.clear()

    # What the tests set up.

    def add_waba(self, waba_id: str, token: str, numbers: list[dict[str, Any]]) -> Waba:
        waba = self.wabas[waba_id] = Waba(token, [dict(number) for number in numbers])
        return waba

    def grant(self, phone_number_id: str, user: str, status: str = "temporary", **extra) -> None:
        """Meta's answer about calling user (digits or +digits) from the number."""
        self.permissions[(phone_number_id, user.lstrip("+"))] = {"status": status, **extra}

    @property
    def requests(self) -> list[Received]:
        with self.receiver.lock:
            return list(self.receiver.requests)

    def tokens_seen(self) -> list[str]:
        return [
            request.headers.get("Authorization", "").removeprefix("Bearer ")
            for request in self.requests
        ]

    # The server.

    def answer(self, request: Received) -> Answer:
        parts = urlsplit(request.path)
        path = parts.path.removeprefix(f"/{VERSION}/").strip("/")
        query = {key: values[0] for key, values in parse_qs(parts.query).items()}
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        failure = self.fail.get(token) or next(
            (self.fail[key] for key in path.split("/") if key in self.fail), None
        )
        if isinstance(failure, tuple) and failure[0] == "slow":
            return Answer(status=200, body=b"{}", delay=failure[1])
        if failure:
            return self.error(failure)
        head, _, rest = path.partition("/")
        if rest == "phone_numbers" and request.method == "GET":
            return self.phone_numbers(head, token, query)
        if rest == "call_permissions" and request.method == "GET":
            return self.call_permissions(head, query)
        if rest == "messages" and request.method == "POST":
            return self.message(head, request.json())
        if rest == "calls" and request.method == "POST" and self.on_calls is not None:
            return self.on_calls(head, request)
        return self.error("unknown_waba")

    def error(self, name: str) -> Answer:
        status, error = ERRORS[name]
        return self.json({"error": error}, status)

    @staticmethod
    def json(body: dict[str, Any], status: int = 200) -> Answer:
        return Answer(
            status=status,
            body=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )

    def phone_numbers(self, waba_id: str, token: str, query: dict[str, str]) -> Answer:
        waba = self.wabas.get(waba_id) or self.any_waba
        if waba is None:
            return self.error("unknown_waba")
        if waba.token is not None and token != waba.token:
            return self.error("auth")
        start = int(query.get("after") or 0)
        page = waba.numbers[start : start + self.page_size]
        body: dict[str, Any] = {"data": page}
        end = start + len(page)
        if end < len(waba.numbers):
            body["paging"] = {
                "cursors": {"before": str(start), "after": str(end)},
                "next": self.next_link
                or f"{self.url}/{waba_id}/phone_numbers?limit={self.page_size}&after={end}",
            }
        return self.json(body)

    def call_permissions(self, phone_number_id: str, query: dict[str, str]) -> Answer:
        user = query.get("user_wa_id", "").lstrip("+")
        given = self.permissions.get((phone_number_id, user), {"status": "no_permission"})
        granted = given["status"] in ("temporary", "permanent")
        permission = {"status": given["status"]}
        if "expiration_time" in given:
            permission["expiration_time"] = given["expiration_time"]
        return self.json(
            {
                "messaging_product": "whatsapp",
                "permission": permission,
                "actions": [
                    {
                        "action_name": "send_call_permission_request",
                        "can_perform_action": given.get("can_request", not granted),
                        "limits": [
                            {"time_period": "PT24H", "max_allowed": 1, "current_usage": 0},
                            {"time_period": "P7D", "max_allowed": 2, "current_usage": 0},
                        ],
                    },
                    {
                        "action_name": "start_call",
                        "can_perform_action": given.get("can_call", granted),
                        "limits": [
                            {"time_period": "PT24H", "max_allowed": 100, "current_usage": 0}
                        ],
                    },
                ],
            }
        )

    def message(self, phone_number_id: str, body: dict[str, Any]) -> Answer:
        with self.lock:
            self.messages.append({"from": phone_number_id, **body})
            message_id = f"wamid.fake{len(self.messages)}"
        to = str(body.get("to", ""))
        return self.json(
            {
                "messaging_product": "whatsapp",
                "contacts": [{"input": to, "wa_id": to.lstrip("+")}],
                "messages": [{"id": message_id}],
            }
        )


def number(phone_number_id: str, display: str, name: str = "Toko Maju", rating="GREEN") -> dict:
    """A phone number as Graph lists it."""
    return {
        "id": phone_number_id,
        "display_phone_number": display,
        "verified_name": name,
        "quality_rating": rating,
    }
