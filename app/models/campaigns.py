"""Campaigns of outbound calls and their contacts."""

from typing import Any

import peewee as pw

from app.db import BaseModel
from app.models.agents import Agent
from app.models.fields import JSONField, id_field
from app.models.phone_numbers import PhoneNumber
from app.models.tenants import Tenant
from app.util import utcnow


class Campaign(BaseModel):
    """A batch of outbound calls: its contacts are placed by the sweep inside its schedule
    window, at most max_concurrent_calls queued or in progress at once (app.services.campaigns)."""

    id = id_field()
    tenant = pw.ForeignKeyField(Tenant, backref="campaigns", on_delete="CASCADE")
    name = pw.CharField(max_length=100)
    phone_number = pw.ForeignKeyField(PhoneNumber, null=True, on_delete="SET NULL")
    agent = pw.ForeignKeyField(Agent, null=True, on_delete="SET NULL")
    status = pw.CharField(max_length=16, default="running")  # running|paused|canceled|completed
    max_concurrent_calls = pw.IntegerField(default=1)
    # The schedule window, in the campaign's time zone; all None: any time.
    timezone = pw.CharField(max_length=64, null=True)  # IANA name
    days = JSONField(null=True)  # ["mon", …]
    window_start = pw.CharField(max_length=5, null=True)  # "09:00"
    window_end = pw.CharField(max_length=5, null=True)  # "17:00", after the start
    max_attempts = pw.IntegerField(default=1)
    retry_delay_minutes = pw.IntegerField(default=60)
    retry_on = JSONField(default=list)  # outcomes retried: no_answer, busy, voicemail, failed
    # Contacts by status, kept with every change of a contact (no COUNT over the contacts):
    # in_progress_count is what the concurrency cap compares with max_concurrent_calls.
    total_count = pw.IntegerField(default=0)
    pending_count = pw.IntegerField(default=0)
    in_progress_count = pw.IntegerField(default=0)
    completed_count = pw.IntegerField(default=0)
    failed_count = pw.IntegerField(default=0)
    # On a WhatsApp number: contacts waiting for the user's call permission (no attempt used),
    # how long they wait before ending no_permission, and whether and how the campaign asks
    # each of them once ({"requestPermission": true, "text"?, "template"?}; None: it does not).
    awaiting_permission_count = pw.IntegerField(default=0)
    permission_wait_hours = pw.IntegerField(default=24)
    whatsapp = JSONField(null=True)
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)
    completed_at = pw.DateTimeField(null=True)
    # While running: the sweep looks at it from then on (UTC). Its schedule window's next
    # opening while the window is closed, its next retry while no contact is due, else when it
    # was created, resumed or last served (so the least recently served come first).
    due_at = pw.DateTimeField(default=utcnow)

    @property
    def schedule(self) -> dict[str, Any] | None:
        """The window calls are placed in, or None: any time."""
        if self.timezone is None:
            return None
        return {
            "timezone": self.timezone,
            "days": self.days,
            "start": self.window_start,
            "end": self.window_end,
        }

    @property
    def retry(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "delay_minutes": self.retry_delay_minutes,
            "on": self.retry_on,
        }

    @property
    def counts(self) -> dict[str, int]:
        """The contacts by status."""
        return {
            "total": self.total_count,
            "pending": self.pending_count,
            "in_progress": self.in_progress_count,
            "completed": self.completed_count,
            "failed": self.failed_count,
            "awaiting_permission": self.awaiting_permission_count,
        }

    class Meta:
        indexes = (
            (("tenant", "created_at", "id"), False),
            # The sweep's campaigns: the running ones that are due.
            (("status", "due_at"), False),
        )


class CampaignContact(BaseModel):
    """One number of a campaign, its variables and where it stands: pending (due at
    next_attempt_at), in_progress (its call is queued or under way), completed or failed."""

    id = id_field()
    campaign = pw.ForeignKeyField(Campaign, backref="contacts", on_delete="CASCADE")
    seq = pw.IntegerField()  # 1, 2, 3, … in the order the contacts were given
    to_number = pw.CharField(max_length=16)
    variables = JSONField(default=dict)
    status = pw.CharField(max_length=24, default="pending")
    attempts = pw.IntegerField(default=0)  # calls placed for it
    next_attempt_at = pw.DateTimeField(null=True)  # while pending: not placed before then
    last_outcome = pw.CharField(max_length=32, null=True)  # completed, no_answer, busy, …
    # awaiting_permission since then (ends no_permission after the campaign's wait), and when
    # the campaign asked the user for permission (once).
    awaiting_since = pw.DateTimeField(null=True)
    permission_requested_at = pw.DateTimeField(null=True)
    updated_at = pw.DateTimeField(default=utcnow)
    call_ids: list[str]  # not a column: filled by campaigns.list_contacts

    class Meta:
        indexes = (
            (("campaign", "seq"), True),
            # The sweep's due contacts of a campaign; a campaign's contacts by status.
            (("campaign", "status", "next_attempt_at", "seq"), False),
            (("campaign", "status", "seq"), False),
        )
