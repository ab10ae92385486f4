"""Campaign contacts on WhatsApp numbers waiting for the user's call permission (DESIGN.md
section 16): the sweep marks a contact the number may not call yet awaiting_permission (no
attempt used); a job on the whatsapp queue asks Meta and, when the campaign says so, asks the
user once; Meta is asked again every PERMISSION_RECHECK_MINUTES; a grant makes the contact due
(campaign_progress.release_awaiting) and a wait past the campaign's permissionWaitHours ends
it no_permission. Graph requests are made outside any transaction."""

import logging
from datetime import datetime, timedelta
from typing import cast

import peewee as pw

from app import queue
from app.db import transaction
from app.errors import AppError
from app.models import Campaign, CampaignContact, PhoneNumber
from app.services import campaign_progress
from app.services.whatsapp import permissions
from app.util import utcnow

log = logging.getLogger(__name__)

# The RQ queue of the jobs that ask Meta and users for call permission (WHATSAPP_WORKERS).
PERMISSION_QUEUE = "whatsapp"
# Contacts a sweep marks awaiting permission, or asks Meta about again, per campaign at most.
PERMISSION_BATCH = 100
# How often Meta is asked again about a contact awaiting permission (a grant usually arrives
# sooner, as the user's reply forwarded by the runtime).
PERMISSION_RECHECK_MINUTES = 60
# A permission request that failed for these reasons was not sent: the next recheck sends it.
UNSENT = ("whatsapp_busy", "whatsapp_rate_limited", "whatsapp_unavailable", "not_configured")


def await_permission(campaign_id: str, contact_ids: list[str], now: datetime) -> None:
    """pending → awaiting_permission for contacts the number may not call yet (no attempt
    used), and, once the sweep's transaction commits, a job each that asks Meta and, when
    the campaign says so, asks the user (app.jobs.seek_call_permission). While it waits a
    contact's next_attempt_at is when Meta is asked again (_recheck_waits)."""
    if not contact_ids:
        return
    CampaignContact.update(
        status="awaiting_permission",
        awaiting_since=now,
        next_attempt_at=now + timedelta(minutes=PERMISSION_RECHECK_MINUTES),
        updated_at=now,
    ).where(CampaignContact.id.in_(contact_ids)).execute()
    Campaign.update(
        {
            Campaign.pending_count: Campaign.pending_count - len(contact_ids),
            Campaign.awaiting_permission_count: Campaign.awaiting_permission_count
            + len(contact_ids),
        }
    ).where(Campaign.id == campaign_id).execute()
    for contact_id in contact_ids:
        queue.defer(PERMISSION_QUEUE, "app.jobs.seek_call_permission", contact_id)


def seek_call_permission(*, contact_id: str) -> str:
    """For a contact awaiting permission: Meta's answer now (a grant makes it due at once),
    else, with the campaign's whatsapp.requestPermission, one permission request to the user
    (never a second: the contact is marked before it is sent, and unmarked only when Meta
    could not be reached, so that the next recheck sends it). Graph requests outside any
    transaction. What happened: granted, requested, waiting or skipped."""
    contact = CampaignContact.get_or_none(CampaignContact.id == contact_id)
    if contact is None or contact.status != "awaiting_permission":
        return "skipped"
    campaign = Campaign.get_by_id(contact.campaign_id)
    number = PhoneNumber.get_or_none(PhoneNumber.id == campaign.phone_number_id)
    if number is None or campaign.status not in ("running", "paused"):
        return "skipped"
    try:
        permissions.require_whatsapp(number)
    except AppError:
        return "skipped"  # the number left WhatsApp: its contacts wait out their time
    to = contact.to_number
    permission: permissions.Permission | None = None
    try:
        permission = permissions.ask_meta(number, to)
    except AppError as exc:
        log.warning("call permission of contact %s not checked: %s", contact_id, exc.code)
    if permission is not None and permission.valid:
        return "granted"
    settings = campaign.whatsapp or {}
    if not settings.get("requestPermission") or contact.permission_requested_at is not None:
        return "waiting"
    if permission is None or not permission.can_request:
        return "waiting"  # Meta did not answer, or allows no request now: the next recheck
    with transaction():
        claimed = (
            CampaignContact.update(permission_requested_at=utcnow())
            .where(
                (CampaignContact.id == contact_id)
                & (CampaignContact.status == "awaiting_permission")
                & CampaignContact.permission_requested_at.is_null()
            )
            .execute()
        )
    if not claimed:
        return "waiting"
    try:
        permissions.send_request(
            number, to, text=settings.get("text"), template=settings.get("template")
        )
    except AppError as exc:
        log.warning("call permission request of contact %s not sent: %s", contact_id, exc.code)
        if exc.code in UNSENT:
            with transaction():
                CampaignContact.update(permission_requested_at=None).where(
                    CampaignContact.id == contact_id
                ).execute()
        return "waiting"
    return "requested"


def _recheck_waits(campaign_id: str, now: datetime) -> int:
    """Ask Meta again about the campaign's contacts awaiting permission whose next check is
    due (a job each, after commit), at most PERMISSION_BATCH per sweep; how many."""
    with transaction():
        campaign = campaign_progress.lock_with_tenant(campaign_id)
        if campaign is None or campaign.status != "running":
            return 0
        query = (
            CampaignContact.select(CampaignContact.id)
            .where(
                (CampaignContact.campaign == campaign_id)
                & (CampaignContact.status == "awaiting_permission")
                & (CampaignContact.next_attempt_at <= now)
            )
            .order_by(CampaignContact.next_attempt_at, CampaignContact.seq)
            .limit(PERMISSION_BATCH)
            .tuples()
        )
        ids = [row[0] for row in cast(list[tuple[str]], list(query))]
        if not ids:
            return 0
        CampaignContact.update(
            next_attempt_at=now + timedelta(minutes=PERMISSION_RECHECK_MINUTES)
        ).where(CampaignContact.id.in_(ids)).execute()
        for contact_id in ids:
            queue.defer(PERMISSION_QUEUE, "app.jobs.seek_call_permission", contact_id)
    return len(ids)


def serve_waits(now: datetime) -> int:
    """For each running campaign with contacts awaiting permission: end those that waited
    longer than its permissionWaitHours (failed, lastOutcome no_permission), and ask Meta
    again about those whose recheck is due. A transaction only for a campaign that has such
    contacts; how many ended."""
    waiting = (
        Campaign.select(Campaign.id, Campaign.permission_wait_hours)
        .where((Campaign.status == "running") & (Campaign.awaiting_permission_count > 0))
        .tuples()
    )
    ended = 0
    for campaign_id, hours in cast(list[tuple[str, int]], list(waiting)):
        first = (
            CampaignContact.select(
                pw.fn.MIN(CampaignContact.awaiting_since),
                pw.fn.MIN(CampaignContact.next_attempt_at),
            )
            .where(
                (CampaignContact.campaign == campaign_id)
                & (CampaignContact.status == "awaiting_permission")
            )
            .tuples()
        )
        oldest, recheck = cast(tuple[datetime | None, datetime | None], first.get())
        if oldest is not None and oldest <= now - timedelta(hours=hours):
            with transaction():
                ended += campaign_progress.expire_waits(campaign_id, now)
        if recheck is not None and recheck <= now:
            _recheck_waits(campaign_id, now)
    return ended
