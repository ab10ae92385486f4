"""Event log schemas: DESIGN.md section 9 (GET /events, GET /events/:id)."""

import re
from typing import Any

from marshmallow import fields, validate

from app.resources.common import Schema
from app.resources.events.payloads import EventDetailSchema, EventSchema
from app.services.events import LOGGED_TYPES

__all__ = ["EventDetailSchema", "EventListSchema", "EventQueryArgsSchema", "EventSchema"]

EVENT_ID = r"^evt_[a-z0-9]{20}$"
_NAME = "(" + "|".join(re.escape(name) for name in LOGGED_TYPES) + ")"
EVENT_NAMES = rf"^{_NAME}(,{_NAME})*$"


class EventNames(fields.String):
    """Event names separated by commas (call.started,call.ended), loaded as a list."""

    default_error_messages = {
        "unknown": "Unknown event name {names}: give names from " + ", ".join(LOGGED_TYPES) + "."
    }

    def _deserialize(  # type: ignore[override]  # a String on the wire, a list loaded
        self, value: Any, attr: Any, data: Any, **kwargs: Any
    ) -> list[str]:
        names = [
            name.strip() for name in super()._deserialize(value, attr, data, **kwargs).split(",")
        ]
        unknown = [name for name in names if name not in LOGGED_TYPES]
        if unknown:
            raise self.make_error("unknown", names=", ".join(repr(name) for name in unknown))
        return list(dict.fromkeys(names))


class EventQueryArgsSchema(Schema):
    """Query parameters of GET /events."""

    after = fields.String(
        validate=validate.Regexp(EVENT_ID, error="Not an event id (evt_ and 20 characters)."),
        metadata={
            "description": "List the events after this one (the nextAfter of the page before); "
            "without it, from the oldest kept. An id that is not one of your kept events is 404."
        },
    )
    types = EventNames(
        metadata={
            "description": "Only these events: names separated by commas, e.g. "
            "call.started,call.ended.",
            "pattern": EVENT_NAMES,
        }
    )
    limit = fields.Integer(
        load_default=50,
        validate=validate.Range(1, 100),
        metadata={"description": "Page size, 1–100 (default 50)."},
    )


class EventListSchema(Schema):
    events = fields.List(
        fields.Nested(EventSchema), required=True, metadata={"description": "Oldest first."}
    )
    has_more = fields.Boolean(
        required=True,
        metadata={"description": "Whether more events follow this page now."},
    )
    next_after = fields.String(
        required=True,
        allow_none=True,
        metadata={
            "description": "Pass it as after for the next page: the last event of this page "
            "(the after given, when the page is empty; null when you have no events)."
        },
    )
