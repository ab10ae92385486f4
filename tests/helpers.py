"""Assertions and values shared by the tests."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from app import db
from app.services.audit import Actor

# Who the changes a test makes by calling services directly (its setup) are by.
ACTOR = Actor.system()


@contextmanager
def captured_queries(*, this_thread: bool = False) -> Iterator[list[Any]]:
    """The statements peewee runs meanwhile, as its query hooks see them (.sql, .params);
    with this_thread, only those of the calling thread."""
    seen: list[Any] = []
    me = threading.get_ident()

    def record(event) -> None:
        if not this_thread or threading.get_ident() == me:
            seen.append(event)

    hooks = db.database.obj.query_hooks
    hooks.append(record)
    try:
        yield seen
    finally:
        hooks.remove(record)


def assert_error(response, status: int, code: str) -> dict:
    """Assert the documented error body and return its error object (of a test client's
    response, or of a requests response from a real server)."""
    real = not hasattr(response, "get_json")
    text = response.text if real else response.get_data(as_text=True)
    assert response.status_code == status, text
    assert response.headers["Content-Type"] == "application/json"
    body = response.json() if real else response.get_json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"code", "message", "details", "requestId"}
    assert error["code"] == code
    assert isinstance(error["message"], str) and error["message"]
    assert error["requestId"] == response.headers["X-Request-Id"]
    return error


# A complete, correctly typed data object of each event, as the service sends it: tests that
# write events directly start from these (the event log shows an event through its schema).
EVENT_DATA = {
    "call.started": {
        "callId": "call_1",
        "phoneNumberId": "pn_1",
        "callerNumber": "+6281234567890",
        "did": "+6221555010",
    },
    "call.answered": {
        "callId": "call_1",
        "agentId": "agent_1",
        "startedAt": "2026-11-21T09:15:02.120Z",
    },
    "call.ended": {
        "callId": "call_1",
        "durationSeconds": 95,
        "hangupReason": "normal",
        "phoneNumberId": "pn_1",
        "callerNumber": "+6281234567890",
        "calleeNumber": "+6221555010",
        "talkTimeSeconds": 80,
        "hangupInitiator": "caller",
        "aiCostIdr": 1200,
        "recordingUrl": "https://recordings.example.com/call_1.wav",
        "costBreakdown": {"llm": 700, "stt": 200, "tts": 200, "telephony": 100, "other": 0},
        "agentVersion": 3,
        "agentId": "agent_1",
        "direction": "inbound",
        "campaignId": None,
    },
    "call.transcript": {"callId": "call_1", "transcriptSummary": "Booked a check-up."},
    "credits.low": {"balanceMinutes": 3, "threshold": 10},
    "function.called": {
        "callId": "call_1",
        "functionName": "check_availability",
        "parameters": {"date": "2026-11-23"},
        "result": {"slots": ["10:00"]},
    },
    "webhook.test": {"webhookId": "wh_1", "message": "A test event from the Voice Agent API."},
    "campaign.completed": {
        "campaignId": "cmp_1",
        "name": "Reminders",
        "counts": {"total": 2, "pending": 0, "inProgress": 0, "completed": 1, "failed": 1},
        "completedAt": "2026-11-21T17:00:00.000Z",
    },
    "call.analyzed": {
        "callId": "call_1",
        "agentId": "agent_1",
        "agentVersion": 3,
        "status": "done",
        "summary": "Booked a check-up for Monday.",
        "successful": True,
        "successReason": "A check-up was booked.",
        "fields": {"interest": "high", "budget": 1500000, "callback": False},
        "planVersion": 3,
        "model": "gemini-2.5-flash",
        "analyzedAt": "2026-11-21T09:16:05.001Z",
        "costIdr": 3,
        "reason": None,
    },
}


def event_data(type: str, **fields) -> dict:
    """EVENT_DATA's object of the event type, with these fields changed."""
    return {**EVENT_DATA[type], **fields}
