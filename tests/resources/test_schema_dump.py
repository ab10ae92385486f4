"""The base Schema's short dump path gives what marshmallow's own path gives."""

import json
from dataclasses import dataclass
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import marshmallow as ma
import pytest

from app.db import Rows, select_rows, timestamp_text
from app.models import Call
from app.resources.agents.schemas import AgentSchema
from app.resources.calls.schemas import CallDetailSchema, CallListSchema, CallSchema
from app.resources.common import Schema, Timestamp
from app.services import agents as agent_service
from app.services.calls import LIST_COLUMNS


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


# Database rows (db.Rows) are dumped from their tuples; the output is the objects' output.

CALLS = [
    {"started_at": datetime(2026, 11, 21, 9, 15, 2, 120999), "metadata": {"k": ["ü", 1]}},
    {
        "started_at": datetime(2026, 1, 1),
        "ended_at": datetime(2026, 1, 1, 0, 3, 0, 1000),
        "status": "ended",
        "duration_seconds": 180,
        "talk_time_seconds": 0,
        "hangup_reason": "normal",
        "transcript_summary": "Asked for the opening hours.",
        "ai_cost_idr": 12_345_678_901,
    },
    {"started_at": datetime(2026, 2, 28, 23, 59, 59, 999999), "agent": None, "metadata": {}},
]


PAGE = {"total": 2, "limit": 50, "offset": 0, "has_more": False}


@pytest.fixture
def call_rows(tenant):
    for number, fields in enumerate(CALLS):
        Call.create(
            id=f"call_{number}",
            tenant=tenant,
            caller_number="+628123456789",
            callee_number="+6221000001",
            **fields,
        )
    return tenant


@pytest.mark.parametrize("columns", [LIST_COLUMNS, "*"], ids=["list columns", "every column"])
def test_database_rows_dump_as_their_objects_dump(call_rows, columns):
    rows = select_rows(Call, f"SELECT {columns} FROM call ORDER BY id", [])
    dumped = CallSchema(many=True).dump(rows)
    assert [as_json(item) for item in dumped] == [
        as_json(CallSchema().dump(item))
        for item in rows  # each item an object
    ]
    assert dumped[0]["startedAt"] == "2026-11-21T09:15:02.120Z"
    assert dumped[1]["startedAt"] == "2026-01-01T00:00:00.000Z"
    assert dumped[1]["endedAt"] == "2026-01-01T00:03:00.001Z"
    assert dumped[0]["metadata"] == {"k": ["ü", 1]}
    assert CallListSchema().dump({"calls": rows[1:], "pagination": PAGE})["calls"] == dumped[1:]


def test_rows_a_schema_reads_more_of_dump_as_objects(call_rows):
    """A field that is not a column of the row (here the detail's answeredAt, not selected)
    takes the objects' path, as marshmallow would: absent from the output."""
    rows = select_rows(Call, f"SELECT {LIST_COLUMNS} FROM call ORDER BY id", [])
    dumped = CallDetailSchema(many=True).dump(rows)
    assert "answeredAt" not in dumped[0]
    assert dumped == [CallDetailSchema().dump(item) for item in rows]


def test_rows_read_as_objects_and_slice_as_rows(call_rows):
    rows = select_rows(Call, "SELECT id, started_at, metadata FROM call ORDER BY id", [])
    assert len(rows) == 3
    assert rows[0].started_at == datetime(2026, 11, 21, 9, 15, 2, 120999)
    assert rows[0].metadata == {"k": ["ü", 1]}
    assert type(rows[1:]) is Rows
    assert [row.id for row in rows[1:]] == ["call_1", "call_2"]


@pytest.mark.parametrize(
    "stored, text",
    [
        ("2026-11-21 09:15:02.120999", "2026-11-21T09:15:02.120Z"),
        ("2026-11-21 09:15:02", "2026-11-21T09:15:02.000Z"),
        ("2026-11-21T09:15:02.120999", "2026-11-21T09:15:02.120Z"),  # other text: parsed
        ("2026-11-21 11:15:02.120999+02:00", "2026-11-21T09:15:02.120Z"),
        (datetime(2026, 11, 21, 9, 15, 2, 120999), "2026-11-21T09:15:02.120Z"),
        (None, None),
    ],
)
def test_a_stored_time_reads_as_the_api_timestamp(stored, text):
    assert timestamp_text(Call.started_at)(stored) == text


def test_agent_rows_dump_as_their_objects_dump(tenant):
    """Agents carry a JSON list, a boolean SQLite stores as 0/1, and a nullable text."""
    agent_service.create_agent(tenant=tenant, name="a", system_prompt="p", tools_enabled=["x"])
    agent_service.create_agent(
        tenant=tenant, name="b", system_prompt="p", is_active=False, escalation_number="+628123"
    )
    rows = agent_service.list_agents(tenant=tenant)
    assert type(rows) is Rows
    dumped = AgentSchema(many=True).dump(rows)
    assert [as_json(item) for item in dumped] == [as_json(AgentSchema().dump(r)) for r in rows]
    assert [(a["toolsEnabled"], a["isActive"]) for a in dumped] == [(["x"], True), ([], False)]
