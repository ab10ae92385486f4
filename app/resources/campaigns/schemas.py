"""Campaign schemas: a campaign with its contacts, schedule and retries; its counts and
per-contact results."""

from functools import cache
from typing import Any
from zoneinfo import available_timezones

from marshmallow import ValidationError, fields, validate, validates_schema

from app.resources.calls.schemas import CalleeNumber, Variables
from app.resources.common import PageArgsSchema, PaginationSchema, Schema
from app.resources.fields import MAX_INT32, StrictInteger, Timestamp
from app.resources.phone_numbers.schemas import PermissionRequestFieldsSchema, TemplateSchema
from app.services.campaign_progress import (
    CAMPAIGN_STATUSES,
    CONTACT_STATUSES,
    DEFAULT_RETRY_ON,
    RETRY_OUTCOMES,
)
from app.services.campaigns import DAYS, MAX_ATTEMPTS, MAX_DELAY_MINUTES, MAX_PERMISSION_WAIT_HOURS

CLOCK = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
# Names in the time zone database that are no place's zone: the host's own setting
# (localtime, which available_timezones() lists from the system's files), the placeholder for
# an unset zone (Factory) and the rules template of POSIX TZ strings (posixrules).
NOT_PLACES = frozenset({"localtime", "Factory", "posixrules"})


@cache
def time_zones() -> frozenset[str]:
    """The IANA time zone names a schedule may name (UTC among them)."""
    return frozenset(available_timezones()) - NOT_PLACES


def known_time_zone(name: str) -> None:
    if name not in time_zones():
        raise ValidationError("Must be an IANA time zone such as Asia/Jakarta.")


def unique(values: list[Any]) -> None:
    if len(set(values)) != len(values):
        raise ValidationError("Each value at most once.")


class ScheduleSchema(Schema):
    """When a campaign may place calls, on the clock of its time zone."""

    timezone = fields.String(
        required=True,
        validate=known_time_zone,
        metadata={"description": "IANA time zone, e.g. Asia/Jakarta."},
    )
    days = fields.List(
        fields.String(validate=validate.OneOf(DAYS)),
        load_default=list(DAYS),
        validate=[validate.Length(1, len(DAYS)), unique],
        metadata={
            "description": "Days calls are placed on (default: every day).",
            "uniqueItems": True,
        },
    )
    start = fields.String(
        required=True,
        validate=validate.Regexp(CLOCK, error="Must be a time such as 09:00."),
        metadata={
            "description": "First minute calls are placed (HH:MM, 24-hour clock).",
            "pattern": CLOCK,
        },
    )
    end = fields.String(
        required=True,
        validate=validate.Regexp(CLOCK, error="Must be a time such as 17:00."),
        metadata={
            "description": "When placing stops (HH:MM, after start; a call placed before it goes "
            "on).",
            "pattern": CLOCK,
        },
    )

    @validates_schema
    def ends_after_it_starts(self, data: dict[str, Any], **kwargs: Any) -> None:
        if data["end"] <= data["start"]:
            raise ValidationError(
                "Must be after start (the window ends on the day it starts).", "end"
            )


class RetrySchema(Schema):
    """Which unanswered calls are tried again, how often and after how long."""

    max_attempts = StrictInteger(
        load_default=1,
        validate=validate.Range(1, MAX_ATTEMPTS),
        metadata={"description": f"Calls per contact at most, 1 to {MAX_ATTEMPTS} (default 1)."},
    )
    delay_minutes = StrictInteger(
        load_default=60,
        validate=validate.Range(1, MAX_DELAY_MINUTES),
        metadata={
            "description": f"Minutes after a call ended before its retry, 1 to "
            f"{MAX_DELAY_MINUTES:,} (default 60)."
        },
    )
    on = fields.List(
        fields.String(validate=validate.OneOf(RETRY_OUTCOMES)),
        load_default=list(DEFAULT_RETRY_ON),
        validate=unique,
        metadata={
            "description": "Outcomes that are retried: no_answer, busy, voicemail (the "
            "hangupReason of an unanswered call) and failed (any other failure); default "
            "no_answer and busy.",
            "uniqueItems": True,
        },
    )


class CampaignWhatsAppSchema(PermissionRequestFieldsSchema):
    """On a WhatsApp number: whether the campaign asks each contact without call permission
    for it, once, and with what."""

    request_permission = fields.Boolean(
        load_default=False,
        metadata={
            "description": "Send each contact awaiting permission one call permission request "
            "(default false: contacts wait for a permission given otherwise)."
        },
    )


class ContactCreateSchema(Schema):
    to = CalleeNumber(required=True)
    variables = Variables(load_default=dict)


class CampaignCreateSchema(Schema):
    """Body of POST /campaigns."""

    name = fields.String(
        required=True,
        validate=validate.Length(1, 100),
        metadata={"description": "What the tenant calls it: 1 to 100 characters."},
    )
    phone_number_id = fields.String(
        required=True,
        validate=validate.Length(1, 32),
        metadata={"description": "pn_…: the tenant's number the calls are placed from."},
    )
    agent_id = fields.String(
        validate=validate.Length(1, 32),
        metadata={"description": "agent_… that talks in the calls; default: the number's agent."},
    )
    contacts = fields.List(
        fields.Nested(ContactCreateSchema),
        required=True,
        validate=validate.Length(min=1),
        metadata={
            "description": "The numbers to call, each with its variables, called in this order: "
            "1 to 10,000 (MAX_CONTACTS_PER_CAMPAIGN; beyond it 409 limit_reached)."
        },
    )
    max_concurrent_calls = StrictInteger(
        load_default=1,
        validate=validate.Range(1, MAX_INT32),
        metadata={
            "description": "The campaign's calls queued or in progress at once: 1 to the "
            "tenant's concurrent-call limit (default 1)."
        },
    )
    schedule = fields.Nested(
        ScheduleSchema,
        metadata={"description": "When calls are placed; absent: at any time."},
    )
    retry = fields.Nested(
        RetrySchema,
        load_default=lambda: RetrySchema().load({}),
        metadata={"description": "Retries of unanswered calls; absent: none."},
    )
    whatsapp = fields.Nested(
        CampaignWhatsAppSchema,
        metadata={
            "description": "WhatsApp numbers only (422 for another number): whether and how "
            "contacts without call permission are asked for it."
        },
    )
    permission_wait_hours = StrictInteger(
        load_default=24,
        validate=validate.Range(1, MAX_PERMISSION_WAIT_HOURS),
        metadata={
            "description": "On a WhatsApp number: hours a contact awaits the user's call "
            f"permission before it ends failed (lastOutcome no_permission), 1 to "
            f"{MAX_PERMISSION_WAIT_HOURS} (default 24)."
        },
    )


class ScheduleRecordSchema(Schema):
    timezone = fields.String(required=True, metadata={"description": "IANA time zone."})
    days = fields.List(fields.String(), required=True, metadata={"description": "Its days."})
    start = fields.String(required=True, metadata={"description": "HH:MM, its first minute."})
    end = fields.String(required=True, metadata={"description": "HH:MM, when placing stops."})


class RetryRecordSchema(Schema):
    max_attempts = fields.Integer(
        required=True, metadata={"description": "Calls per contact at most."}
    )
    delay_minutes = fields.Integer(
        required=True, metadata={"description": "Minutes before a retry."}
    )
    on = fields.List(fields.String(), required=True, metadata={"description": "Outcomes retried."})


class CampaignWhatsAppRecordSchema(Schema):
    request_permission = fields.Boolean(
        attribute="requestPermission",
        required=True,
        metadata={"description": "Whether each contact awaiting permission is asked once."},
    )
    text = fields.String(
        metadata={"description": "The request's body, when given."},
    )
    template = fields.Nested(TemplateSchema, metadata={"description": "The request's template."})


class CountsSchema(Schema):
    total = fields.Integer(required=True, metadata={"description": "Contacts in the campaign."})
    pending = fields.Integer(
        required=True, metadata={"description": "Contacts waiting for a call (first or retry)."}
    )
    in_progress = fields.Integer(
        required=True, metadata={"description": "Contacts whose call is queued or under way."}
    )
    completed = fields.Integer(
        required=True, metadata={"description": "Contacts whose call was answered and ended."}
    )
    failed = fields.Integer(
        required=True,
        metadata={
            "description": "Contacts out of attempts (or canceled alone, or whose wait for "
            "call permission ran out)."
        },
    )
    awaiting_permission = fields.Integer(
        required=True,
        metadata={
            "description": "On a WhatsApp number: contacts waiting for the user's call "
            "permission (no attempt used)."
        },
    )


class CampaignSchema(Schema):
    id = fields.String(required=True, metadata={"description": "cmp_…"})
    name = fields.String(required=True, metadata={"description": "Its name, as given."})
    status = fields.String(
        required=True,
        metadata={
            "description": "running, paused, canceled or completed (every contact done).",
            "enum": CAMPAIGN_STATUSES,
        },
    )
    phone_number_id = fields.String(
        required=True, allow_none=True, metadata={"description": "pn_… it calls from."}
    )
    agent_id = fields.String(
        required=True, allow_none=True, metadata={"description": "agent_… that talks."}
    )
    max_concurrent_calls = fields.Integer(
        required=True,
        metadata={"description": "Its calls queued or in progress at once, at most."},
    )
    schedule = fields.Nested(
        ScheduleRecordSchema,
        required=True,
        allow_none=True,
        metadata={"description": "Its window; null: any time."},
    )
    retry = fields.Nested(RetryRecordSchema, required=True)
    whatsapp = fields.Nested(
        CampaignWhatsAppRecordSchema,
        required=True,
        allow_none=True,
        metadata={"description": "Its call permission requests; null: none sent."},
    )
    permission_wait_hours = fields.Integer(
        required=True,
        metadata={"description": "Hours a contact awaits call permission at most."},
    )
    counts = fields.Nested(CountsSchema, required=True)
    created_at = Timestamp(required=True)
    updated_at = Timestamp(required=True)
    completed_at = Timestamp(
        required=True, allow_none=True, metadata={"description": "When its last contact was done."}
    )


class CampaignListSchema(Schema):
    campaigns = fields.List(fields.Nested(CampaignSchema), required=True)
    pagination = fields.Nested(PaginationSchema, required=True)


class ContactSchema(Schema):
    id = fields.String(required=True, metadata={"description": "cct_…"})
    seq = fields.Integer(
        required=True, metadata={"description": "Its place in the list given: 1, 2, 3, …"}
    )
    to = fields.String(
        attribute="to_number", required=True, metadata={"description": "Its number."}
    )
    variables = fields.Dict(
        keys=fields.String(),
        values=fields.String(),
        required=True,
        metadata={"description": "The values of its call's {{name}} placeholders."},
    )
    status = fields.String(
        required=True,
        metadata={
            "description": "pending (waiting for its first call or a retry), in_progress, "
            "completed, failed or, on a WhatsApp number, awaiting_permission (waiting for "
            "the user's call permission).",
            "enum": CONTACT_STATUSES,
        },
    )
    attempts = fields.Integer(required=True, metadata={"description": "Calls placed for it."})
    last_outcome = fields.String(
        required=True,
        allow_none=True,
        metadata={
            "description": "How its last call went: completed, no_answer, busy, voicemail, "
            "failed or canceled, or no_permission (its wait for call permission ran out); "
            "null before its first call ended."
        },
    )
    next_attempt_at = Timestamp(
        required=True,
        allow_none=True,
        metadata={
            "description": "While pending: when it is due (inside the window); while "
            "awaiting_permission: when Meta is asked about its permission again."
        },
    )
    awaiting_since = Timestamp(
        required=True,
        allow_none=True,
        metadata={"description": "While awaiting_permission: since when."},
    )
    permission_requested_at = Timestamp(
        required=True,
        allow_none=True,
        metadata={"description": "When the campaign asked the user for call permission."},
    )
    call_ids = fields.List(
        fields.String(),
        required=True,
        metadata={"description": "Its calls (call_…), oldest first."},
    )


class ContactListSchema(Schema):
    contacts = fields.List(fields.Nested(ContactSchema), required=True)
    pagination = fields.Nested(PaginationSchema, required=True)


class ContactQueryArgsSchema(PageArgsSchema):
    status = fields.String(
        validate=validate.OneOf(CONTACT_STATUSES),
        metadata={"description": "Only contacts in this status.", "enum": CONTACT_STATUSES},
    )
