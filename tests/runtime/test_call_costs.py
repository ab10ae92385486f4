"""A call's end reports its recording link and its AI cost by component."""

import pytest

from app.models import Call, Event
from tests.call_flow import answer, end_body, report_end, start
from tests.helpers import assert_error

RECORDING = "https://media.example.com/rec/call-17.wav?sig=abc"
COSTS = {"llm": 900, "stt": 250, "tts": 300, "telephony": 120, "other": 30}


@pytest.fixture
def call_id(client, runtime_headers, did):
    call_id = start(client, runtime_headers, did).json["id"]
    answer(client, runtime_headers, call_id)
    return call_id


def end(client, runtime_headers, call_id, **fields):
    body = {**end_body(), **fields}
    for name in [name for name, value in fields.items() if value is None]:
        del body[name]  # a field given as None is left out
    return report_end(client, runtime_headers, call_id, body)


def ended_event(call_id):
    return Event.get((Event.type == "call.ended") & (Event.call_id == call_id)).data


def test_breakdown_and_recording_are_on_the_call_and_in_call_ended(
    client, headers, runtime_headers, call_id
):
    response = end(
        client,
        runtime_headers,
        call_id,
        aiCostIdr=1600,
        costBreakdown=COSTS,
        recordingUrl=RECORDING,
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    assert (response.json["costBreakdown"], response.json["recordingUrl"]) == (COSTS, RECORDING)
    detail = client.get(f"/api/v1/calls/{call_id}", headers=headers).json
    assert (detail["aiCostIdr"], detail["costBreakdown"], detail["recordingUrl"]) == (
        1600,
        COSTS,
        RECORDING,
    )
    data = ended_event(call_id)
    assert (data["aiCostIdr"], data["costBreakdown"], data["recordingUrl"]) == (
        1600,
        COSTS,
        RECORDING,
    )


def test_a_breakdown_alone_makes_ai_cost_its_sum(client, runtime_headers, call_id):
    response = end(client, runtime_headers, call_id, aiCostIdr=None, costBreakdown=COSTS)
    assert response.json["aiCostIdr"] == 1600
    assert ended_event(call_id)["aiCostIdr"] == 1600


def test_a_component_left_out_is_zero(client, runtime_headers, call_id):
    response = end(client, runtime_headers, call_id, aiCostIdr=None, costBreakdown={"llm": 500})
    assert response.json["costBreakdown"] == {
        "llm": 500,
        "stt": 0,
        "tts": 0,
        "telephony": 0,
        "other": 0,
    }
    assert response.json["aiCostIdr"] == 500


def test_an_empty_breakdown_is_a_cost_of_zero(client, runtime_headers, call_id):
    response = end(client, runtime_headers, call_id, aiCostIdr=None, costBreakdown={})
    assert response.json["aiCostIdr"] == 0
    assert set(response.json["costBreakdown"].values()) == {0}


def test_ai_cost_that_is_not_the_breakdowns_sum_is_422(client, runtime_headers, call_id):
    response = end(client, runtime_headers, call_id, aiCostIdr=1599, costBreakdown=COSTS)
    error = assert_error(response, 422, "validation_error")
    assert error["details"] == {"aiCostIdr": ["Must equal the sum of costBreakdown (1600)."]}
    assert Call.get_by_id(call_id).status == "answered"
    assert Event.select().where(Event.type == "call.ended").count() == 0


def test_neither_ai_cost_nor_breakdown_is_422(client, runtime_headers, call_id):
    response = end(client, runtime_headers, call_id, aiCostIdr=None)
    error = assert_error(response, 422, "validation_error")
    assert error["details"] == {"aiCostIdr": ["Send aiCostIdr, costBreakdown or both."]}


def test_a_breakdown_summing_beyond_32_bits_is_422(client, runtime_headers, call_id):
    huge = {name: 2**31 - 1 for name in ("llm", "stt")}
    response = end(client, runtime_headers, call_id, aiCostIdr=None, costBreakdown=huge)
    error = assert_error(response, 422, "validation_error")
    assert set(error["details"]) == {"costBreakdown"}
    assert Call.get_by_id(call_id).status == "answered"


@pytest.mark.parametrize(
    "breakdown",
    [
        {"llm": -1},
        {"llm": 1.5},
        {"llm": "100"},
        {"llm": None},
        {"gpu": 5},
        {"llm": 2**31},
        [100],
        "100",
    ],
)
def test_a_bad_breakdown_is_422_naming_it(client, runtime_headers, call_id, breakdown):
    response = end(client, runtime_headers, call_id, costBreakdown=breakdown)
    error = assert_error(response, 422, "validation_error")
    assert set(error["details"]) == {"costBreakdown"}


@pytest.mark.parametrize(
    "url",
    [
        "http://media.example.com/rec.wav",
        "javascript:alert(1)",
        "https://user:secret@media.example.com/rec.wav",
        "https://media.example.com/rec 1.wav",
        "https://media.example.com/\r\nX: 1",
        "https://",
        "ftp://media.example.com/rec.wav",
        "https://media.example.com/" + "a" * 2030,
        "",
        5,
    ],
)
def test_a_recording_url_that_is_not_https_is_422(client, runtime_headers, call_id, url):
    response = end(client, runtime_headers, call_id, recordingUrl=url)
    assert set(assert_error(response, 422, "validation_error")["details"]) == {"recordingUrl"}


def test_a_recording_url_of_2048_characters_is_kept(client, runtime_headers, call_id):
    url = "https://media.example.com/" + "a" * (2048 - 26)
    assert len(url) == 2048
    response = end(client, runtime_headers, call_id, recordingUrl=url)
    assert response.json["recordingUrl"] == url


def test_a_repeated_end_keeps_the_first_report(client, runtime_headers, call_id):
    end(client, runtime_headers, call_id, costBreakdown=COSTS, aiCostIdr=None)
    changed = {"costBreakdown": {"llm": 1}, "aiCostIdr": None, "recordingUrl": RECORDING}
    again = end(client, runtime_headers, call_id, **changed)
    assert again.status_code == 200
    assert (again.json["costBreakdown"], again.json["recordingUrl"]) == (COSTS, None)
