"""The base Schema's short dump path gives what marshmallow's own path gives."""

import json
from dataclasses import dataclass
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import marshmallow as ma
import pytest

from app.resources.common import Schema, Timestamp


class NoneAsText(ma.fields.String):
    """A field of the project's own that dumps None as something else."""

    def _serialize(self, value: Any, attr: Any, obj: Any, **kwargs: Any) -> str:
        return "none" if value is None else value


class Item(Schema):
    id = ma.fields.String()
    count = ma.fields.Integer(data_key="itemCount", allow_none=True)
    label = ma.fields.String(attribute="name", dump_default="unnamed")
    flag = ma.fields.Boolean(allow_none=True)
    at = Timestamp(allow_none=True)
    extra = ma.fields.Dict()
    ratio = ma.fields.Float(allow_none=True)
    note = NoneAsText()


class Hooked(Item):
    @ma.post_dump
    def mark(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {**data, "hooked": True}


class Listing(Schema):
    items = ma.fields.List(ma.fields.Nested(Item))
    hooked = ma.fields.List(ma.fields.Nested(Hooked), allow_none=True)
    first = ma.fields.Nested(Item, allow_none=True)
    total = ma.fields.Integer(as_string=True)


@dataclass
class Row:
    id: str
    count: Any
    name: str
    flag: Any
    at: Any
    extra: dict[str, Any]
    ratio: Any
    note: Any = None


def marshmallow_dump(schema_class: type[ma.Schema], obj: Any) -> str:
    """obj dumped by a plain marshmallow Schema with the same fields (its own dump path), as
    JSON: True and 1 are equal in Python, not on the wire."""
    return as_json(_plain(schema_class)().dump(obj))


def as_json(dumped: Any) -> str:
    return json.dumps(dumped)


def _plain(schema_class: type[ma.Schema]) -> type[ma.Schema]:
    attrs: dict[str, Any] = {
        name: _plain_field(field) for name, field in schema_class._declared_fields.items()
    }
    for name in dir(schema_class):
        if hasattr(getattr(schema_class, name, None), "__marshmallow_hook__"):
            attrs[name] = getattr(schema_class, name)
    return type("Plain" + schema_class.__name__, (ma.Schema,), attrs)


def _plain_field(field: ma.fields.Field) -> ma.fields.Field:
    options = {"allow_none": field.allow_none, "data_key": field.data_key}
    if type(field) is ma.fields.List:
        return ma.fields.List(_plain_field(field.inner), **options)
    if type(field) is ma.fields.Nested:
        return ma.fields.Nested(_plain(field.nested), **options)
    return field


ROWS = [
    Row("a", 3, "first", True, datetime(2026, 11, 21, 9, 15, 2, 120000), {"k": [1]}, 0.5, "x"),
    Row("b", None, "second", None, None, {}, None),
    Row("c", True, "third", 1, datetime(2026, 1, 1), {"n": None}, 2),  # not the plain types
]


@pytest.mark.parametrize("obj", [*ROWS, SimpleNamespace(id="d", extra={})], ids=str)
def test_an_object_dumps_as_marshmallow_dumps_it(obj):
    assert as_json(Item().dump(obj)) == marshmallow_dump(Item, obj)


def test_a_mapping_dumps_as_marshmallow_dumps_it():
    mapping = {"id": "m", "count": 2, "extra": {}, "name": "from key", "at": None}
    assert as_json(Item().dump(mapping)) == marshmallow_dump(Item, mapping)


def test_lists_of_nested_objects_dump_as_marshmallow_dumps_them():
    body = {"items": [*ROWS, None], "hooked": ROWS, "first": ROWS[0], "total": 3}
    dumped = Listing().dump(body)
    assert as_json(dumped) == marshmallow_dump(Listing, body)
    assert all(item["hooked"] for item in dumped["hooked"])
    assert dumped["items"][3] is None
    assert Listing().dump({"items": [], "hooked": None, "first": None, "total": 0}) == {
        "items": [],
        "hooked": None,
        "first": None,
        "total": "0",
    }


def test_many_dumps_each_item():
    dumped = Item(many=True).dump(ROWS)
    assert [as_json(item) for item in dumped] == [marshmallow_dump(Item, row) for row in ROWS]
