"""Driving calls through the runtime API in tests."""

RUNTIME = "/internal/v1/calls"
CALLER = "+6281234567890"


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


def end(client, headers, call_id, **fields):
    return client.post(f"{RUNTIME}/{call_id}/ended", json=end_body(**fields), headers=headers)


def whole_call(client, headers, did, **end_fields):
    """Start, answer and end a call; return its id."""
    response = start(client, headers, did)
    assert response.status_code == 201, response.get_data(as_text=True)
    call_id = response.json["id"]
    assert answer(client, headers, call_id).status_code == 200
    assert end(client, headers, call_id, **end_fields).status_code == 200
    return call_id
