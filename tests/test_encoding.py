"""Responses are encoded with orjson, with Flask's own encoder where orjson refuses."""

import json
from dataclasses import dataclass
from datetime import datetime

from flask import jsonify

from app.encoding import OrjsonProvider


@dataclass
class Point:
    x: int


def test_the_json_is_what_flask_would_write_but_utf8(app):
    value = {"name": "Añsel ☎", "n": 1, "f": 0.5, "none": None, "list": [True, {}]}
    body = jsonify(value).get_data()
    assert body == json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def test_keys_keep_their_order(app):
    assert jsonify({"b": 1, "a": {"d": 2, "c": 3}}).get_data() == b'{"b":1,"a":{"d":2,"c":3}}\n'


def test_keys_are_sorted_when_the_provider_is_asked_to(app):
    provider = OrjsonProvider(app)
    assert provider.sort_keys is True  # Flask's default
    assert provider.dumps({"b": 1, "a": 2}, separators=(",", ":")) == '{"a":2,"b":1}'


def test_times_and_dataclasses_are_written_as_flask_writes_them(app):
    value = {"at": datetime(2026, 1, 2, 3, 4, 5), "point": Point(1)}
    assert jsonify(value).get_json() == {"at": "Fri, 02 Jan 2026 03:04:05 GMT", "point": {"x": 1}}


def test_what_orjson_refuses_goes_through_flasks_encoder(app):
    for value in ({"big": 2**70}, {"text": "\ud800"}):
        response = jsonify(value)
        assert response.status_code == 200
        expected = json.dumps(value, separators=(",", ":"))  # Flask's: ASCII with \u escapes
        assert response.get_data() == (expected + "\n").encode()


def test_other_dumps_arguments_go_through_flasks_encoder(app):
    assert app.json.dumps({"a": "ü"}) == '{"a": "\\u00fc"}'


def test_debug_output_stays_indented(app):
    app.debug = True
    assert jsonify({"a": 1}).get_data() == b'{\n  "a": 1\n}\n'
