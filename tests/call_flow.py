"""Driving calls through the runtime API in tests."""

from datetime import timedelta

from app.models import Call
from app.services.calls.constants import OPEN_STATUSES

RUNTIME = "/internal/v1/calls"
CALLER = "+6281234567890"


def backdate(call_id, seconds):
    """Move the call's start seconds earlier, as if it had been going on that much longer:
    a call may not report a duration much longer than it has lived (the service's clock),
    and a test ends its calls at once. A call that does not exist or has ended already (its
    length is told) is left alone."""
    if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds <= 0:
        return  # not a duration the runtime API takes: the test is about that
    call = Call.get_or_none(Call.id == call_id)
    if call is not None and call.status in OPEN_STATUSES:
        earlier = call.started_at - timedelta(seconds=seconds)
        Call.update(started_at=earlier).where(Call.id == call_id).execute()


def end_body(**fields):
    # A call lasts at least as long as its talk time (the runtime API checks it).
    talk = fields.get("talkTimeSeconds", 80)
    return {
        "status": "ended",
        "durationSeconds": max(95, talk + 15) if isinstance(talk, int) else 95,
        "talkTimeSeconds": 80,
        "hangupReason": "normal",
        "hangupInitiator": "caller",
        "aiCostIdr": 1200,
        **fields,
    }


def start(client, headers, did, **fields):
    return client.post(
        RUNTIME, json={"did": did, "callerNumber": CALLER, **fields}, headers=headers
    )


def answer(client, headers, call_id):
    return client.post(f"{RUNTIME}/{call_id}/answered", headers=headers)


def report_end(client, headers, call_id, body):
    """POST body as the call's end, after letting the call live its durationSeconds
    (backdate)."""
    backdate(call_id, body.get("durationSeconds"))
    return client.post(f"{RUNTIME}/{call_id}/ended", json=body, headers=headers)


def end(client, headers, call_id, **fields):
    """Report the call's end (end_body with these fields) after it lived its duration."""
    return report_end(client, headers, call_id, end_body(**fields))


def whole_call(client, headers, did, **end_fields):
    """Start, answer and end a call; return its id."""
    response = start(client, headers, did)
    assert response.status_code == 201, response.get_data(as_text=True)
    call_id = response.json["id"]
    assert answer(client, headers, call_id).status_code == 200
    assert end(client, headers, call_id, **end_fields).status_code == 200
    return call_id
