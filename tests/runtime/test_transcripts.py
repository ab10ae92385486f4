"""Transcript turns: appended in order by the runtime, bounded per call, read by the tenant."""

import pytest

from app.models import Call, CallTurn, Event
from app.services.calls import history as call_history
from tests.call_flow import RUNTIME, start, whole_call
from tests.helpers import assert_error

GREETING = {"role": "agent", "text": "Halo, klinik Sehat. Ada yang bisa dibantu?", "startMs": 0}
QUESTION = {"role": "caller", "text": "Saya mau booking dokter gigi.", "startMs": 3200}


def post(client, runtime_headers, call_id, **body):
    return client.post(f"{RUNTIME}/{call_id}/transcript", json=body, headers=runtime_headers)


def transcript(client, headers, call_id):
    response = client.get(f"/api/v1/calls/{call_id}/transcript", headers=headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.json


@pytest.fixture
def call_id(client, runtime_headers, did):
    return start(client, runtime_headers, did).json["id"]


def test_turns_are_appended_in_order_across_posts(client, headers, runtime_headers, call_id):
    first = post(client, runtime_headers, call_id, turns=[GREETING, {**QUESTION, "endMs": 5100}])
    assert first.status_code == 200 and first.json["id"] == call_id
    answer = {"role": "agent", "text": "Baik, untuk hari apa?"}
    assert post(client, runtime_headers, call_id, turns=[answer]).status_code == 200

    assert transcript(client, headers, call_id) == {
        "callId": call_id,
        "transcriptSummary": None,
        "turns": [
            {"seq": 1, **GREETING, "endMs": None},
            {"seq": 2, **QUESTION, "endMs": 5100},
            {"seq": 3, **answer, "startMs": None, "endMs": None},
        ],
    }


def test_a_call_without_a_transcript_reads_empty(client, headers, call_id):
    assert transcript(client, headers, call_id) == {
        "callId": call_id,
        "transcriptSummary": None,
        "turns": [],
    }


def test_turns_without_a_summary_emit_nothing(client, runtime_headers, call_id):
    post(client, runtime_headers, call_id, turns=[GREETING])
    assert Event.select().where(Event.type == "call.transcript").count() == 0


def test_summary_and_turns_in_one_post_store_both_and_emit_once(
    client, headers, runtime_headers, call_id
):
    response = post(
        client, runtime_headers, call_id, transcriptSummary="Wants a dentist.", turns=[QUESTION]
    )
    assert response.json["transcriptSummary"] == "Wants a dentist."
    read = transcript(client, headers, call_id)
    assert (read["transcriptSummary"], len(read["turns"])) == ("Wants a dentist.", 1)
    [event] = Event.select().where(Event.type == "call.transcript")
    assert event.data == {"callId": call_id, "transcriptSummary": "Wants a dentist."}


def test_turns_may_come_after_the_call_ended(client, headers, runtime_headers, did):
    call_id = whole_call(client, runtime_headers, did)
    assert post(client, runtime_headers, call_id, turns=[GREETING]).status_code == 200
    assert len(transcript(client, headers, call_id)["turns"]) == 1


def turns_of(count, text="x"):
    return [{"role": ("agent", "caller")[i % 2], "text": text} for i in range(count)]


def test_the_two_thousandth_turn_is_taken_and_the_next_is_422(
    client, headers, runtime_headers, call_id
):
    assert post(client, runtime_headers, call_id, turns=turns_of(1999)).status_code == 200
    assert post(client, runtime_headers, call_id, turns=turns_of(1)).status_code == 200
    refused = post(client, runtime_headers, call_id, turns=turns_of(1))
    error = assert_error(refused, 422, "validation_error")
    assert set(error["details"]) == {"turns"}
    assert "at most 2,000 turns" in error["details"]["turns"][0]
    read = transcript(client, headers, call_id)
    assert [turn["seq"] for turn in read["turns"]] == list(range(1, 2001))


def test_a_post_that_would_cross_the_turn_limit_stores_nothing_of_itself(
    client, headers, runtime_headers, call_id
):
    post(client, runtime_headers, call_id, transcriptSummary="Kept.", turns=turns_of(1990))
    refused = post(
        client, runtime_headers, call_id, transcriptSummary="Not kept.", turns=turns_of(11)
    )
    assert_error(refused, 422, "validation_error")
    read = transcript(client, headers, call_id)
    assert (read["transcriptSummary"], len(read["turns"])) == ("Kept.", 1990)
    call = Call.get_by_id(call_id)
    assert (call.turns_count, call.turns_bytes) == (1990, 1990)
    assert Event.select().where(Event.type == "call.transcript").count() == 1
    # What still fits is taken.
    assert post(client, runtime_headers, call_id, turns=turns_of(10)).status_code == 200
    assert len(transcript(client, headers, call_id)["turns"]) == 2000


def test_text_beyond_256_kib_is_422_and_keeps_what_was_stored(
    client, headers, runtime_headers, call_id
):
    # 4 turns of 64 KiB in UTF-8: "é" is 2 bytes.
    quarter = "é" * (32 * 1024)
    assert post(client, runtime_headers, call_id, turns=turns_of(3, quarter)).status_code == 200
    assert post(client, runtime_headers, call_id, turns=turns_of(1, quarter[:-1])).status_code == (
        200
    )
    # 2 bytes left: a 3-byte character does not fit, a 2-byte one does.
    too_much = post(client, runtime_headers, call_id, turns=turns_of(1, "€"))
    error = assert_error(too_much, 422, "validation_error")
    assert "262,144 bytes" in error["details"]["turns"][0]
    assert Call.get_by_id(call_id).turns_bytes == 256 * 1024 - 2
    assert post(client, runtime_headers, call_id, turns=turns_of(1, "é")).status_code == 200
    read = transcript(client, headers, call_id)
    assert len(read["turns"]) == 5
    assert sum(len(turn["text"].encode()) for turn in read["turns"]) == 256 * 1024


@pytest.mark.parametrize(
    ("turn", "field"),
    [
        ({"role": "robot", "text": "x"}, "role"),
        ({"role": "agent", "text": ""}, "text"),
        ({"role": "agent"}, "text"),
        ({"text": "x"}, "role"),
        ({"role": "agent", "text": "x", "startMs": -1}, "startMs"),
        ({"role": "agent", "text": "x", "startMs": "10"}, "startMs"),
        ({"role": "agent", "text": "x", "endMs": 86_400_001}, "endMs"),
        ({"role": "agent", "text": "x", "startMs": 500, "endMs": 499}, "endMs"),
        ({"role": "agent", "text": "x", "speaker": "a"}, "speaker"),
    ],
)
def test_a_bad_turn_is_422_naming_it_and_stores_nothing(
    client, runtime_headers, call_id, turn, field
):
    response = post(client, runtime_headers, call_id, turns=[GREETING, turn])
    error = assert_error(response, 422, "validation_error")
    assert error["details"] == {"turns": {"1": {field: error["details"]["turns"]["1"][field]}}}
    assert CallTurn.select().count() == 0


CONTROLS = [
    "\x1b[2J\x1b[1;31mYour account is locked\x1b[0m",  # ESC sequences
    "ring\x07",  # BEL
    "\u202egnp.exe",  # a right-to-left override
    "a \u2066isolated\u2069 word",  # an isolate
    "paid\rrefused",  # a carriage return that rewrites the line
    "\x9b31m",  # a C1 control sequence introducer
]


@pytest.mark.parametrize("text", CONTROLS)
def test_a_turn_with_a_control_character_is_422_naming_its_text(
    client, runtime_headers, call_id, text
):
    response = post(
        client, runtime_headers, call_id, turns=[GREETING, {"role": "caller", "text": text}]
    )
    error = assert_error(response, 422, "validation_error")
    [message] = error["details"]["turns"]["1"]["text"]
    assert message.startswith("Must not contain control characters or bidirectional overrides")
    assert CallTurn.select().count() == 0


@pytest.mark.parametrize("text", CONTROLS)
def test_a_summary_with_a_control_character_is_422_naming_it(
    client, runtime_headers, call_id, text
):
    response = post(client, runtime_headers, call_id, transcriptSummary=text)
    error = assert_error(response, 422, "validation_error")
    assert list(error["details"]) == ["transcriptSummary"]
    assert Call.get_by_id(call_id).transcript_summary is None
    assert not Event.select().where(Event.type == "call.transcript").exists()


def test_lines_and_tabs_are_kept_in_turns_and_the_summary(
    client, headers, runtime_headers, call_id
):
    text = "Jadwal:\n\tSenin 10:00\r\n\tSelasa 14:30 — é, 日本語, 👍"
    summary = "caller: booked\nagent: confirmed\r\n"
    response = post(
        client,
        runtime_headers,
        call_id,
        transcriptSummary=summary,
        turns=[{"role": "agent", "text": text}],
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    read = transcript(client, headers, call_id)
    assert (read["transcriptSummary"], read["turns"][0]["text"]) == (summary, text)


@pytest.mark.parametrize("turns", [[], "hello", [["agent", "x"]], turns_of(2001)])
def test_turns_must_be_a_list_of_1_to_2000_turns(client, runtime_headers, call_id, turns):
    response = post(client, runtime_headers, call_id, turns=turns)
    error = assert_error(response, 422, "validation_error")
    assert set(error["details"]) == {"turns"}
    assert CallTurn.select().count() == 0


def test_turns_of_an_unknown_call_are_404(client, runtime_headers):
    assert_error(post(client, runtime_headers, "call_nope", turns=[GREETING]), 404, "not_found")


def test_the_transcript_of_an_unknown_call_is_404(client, headers):
    response = client.get("/api/v1/calls/call_nope/transcript", headers=headers)
    assert_error(response, 404, "not_found")


def test_another_tenants_transcript_is_404(client, other_headers, runtime_headers, call_id):
    post(client, runtime_headers, call_id, turns=[GREETING])
    response = client.get(f"/api/v1/calls/{call_id}/transcript", headers=other_headers)
    assert_error(response, 404, "not_found")


def test_the_transcript_is_read_in_two_queries(client, headers, runtime_headers, call_id):
    from playhouse.test_utils import count_queries

    post(client, runtime_headers, call_id, turns=turns_of(20))
    tenant = Call.get_by_id(call_id).tenant
    with count_queries() as counter:
        read = call_history.get_transcript(tenant=tenant, call_id=call_id)
    assert len(read.turns) == 20
    assert counter.count == 2
