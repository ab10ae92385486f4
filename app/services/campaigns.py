"""Campaigns: a batch of outbound calls to a list of contacts, each with its own variables.

The sweep (place_due, run by the worker every few seconds and by the inline runner without
Redis) places the calls of due contacts as queued outbound calls: only inside the campaign's
schedule window (in its own time zone), never more than max_concurrent_calls of the
campaign queued or in progress, a retry only delayMinutes after the call it follows. The
runtime claims them from dispatch, which admits each within the tenant's own limit.

The sweep's query selects only due campaigns (DESIGN.md section 15, shared loops are fair):
a time-zone window cannot be read in portable SQL, so each campaign keeps the UTC time it is
next due (due_at: its window's next opening, its next retry, or when it was last served),
and the campaigns are taken a tenant at a time, each tenant's least recently served first,
so no tenant's campaigns, closed or many, hide another's.

A contact is claimed in the database, in the transaction that queues its call (pending →
in_progress, the call row, the counts): a worker killed at any moment has placed a contact's
call and marked it, or neither. Its outcome is written in the transaction that ends the call
(app.services.campaign_progress).
"""

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from zoneinfo import ZoneInfo

import peewee as pw

from app.db import is_sqlite, transaction, unit_of_work
from app.errors import Conflict, NotFound, ValidationFailed
from app.models import Call, Campaign, CampaignContact, PhoneNumber, Tenant
from app.services import audit, campaign_permissions, campaign_progress, limits
from app.services import tenants as tenant_service
from app.services.calls import admission
from app.services.calls import outbound as outbound_calls
from app.services.pages import Page, paginate
from app.services.whatsapp import permissions
from app.util import new_id, utcnow

log = logging.getLogger(__name__)

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MAX_ATTEMPTS = 5
MAX_DELAY_MINUTES = 1440
CONTACTS_PER_INSERT = 500
# Campaigns looked at by one sweep: due ones with room and pending contacts, by tenant in turn.
SWEEP_CAMPAIGNS = 200
# A contact waits for the user's call permission this many hours at most (default 24).
MAX_PERMISSION_WAIT_HOURS = 168


@dataclass(frozen=True)
class Contact:
    to: str
    variables: dict[str, str]


def window_open(campaign: Campaign, moment: datetime) -> bool:
    """Whether the campaign may place calls at moment (naive UTC): any time without a
    schedule, else on one of its days between start (included) and end (excluded), read on
    the clock of its time zone."""
    if campaign.timezone is None:
        return True
    local = moment.replace(tzinfo=UTC).astimezone(ZoneInfo(campaign.timezone))
    if DAYS[local.weekday()] not in campaign.days:
        return False
    return str(campaign.window_start) <= local.strftime("%H:%M") < str(campaign.window_end)


def next_opening(campaign: Campaign, moment: datetime) -> datetime:
    """When the campaign's window next opens after moment (naive UTC): its start on the next of
    its days whose start is later. A start the clock skips (a DST gap) is read with the offset
    before the gap: late by at most the gap, never early."""
    if campaign.timezone is None:
        return moment
    zone = ZoneInfo(campaign.timezone)
    local = moment.replace(tzinfo=UTC).astimezone(zone)
    hour, minute = (int(part) for part in str(campaign.window_start).split(":"))
    for ahead in range(8):
        day = local.date() + timedelta(days=ahead)
        if DAYS[day.weekday()] not in campaign.days:
            continue
        start = datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone)
        opening = start.astimezone(UTC).replace(tzinfo=None)
        if opening > moment:
            return opening
    return moment + timedelta(days=1)  # no day listed: the schema forbids it; look tomorrow


def due_from(campaign: Campaign, moment: datetime) -> datetime:
    """A running campaign's due_at from moment on: moment while its window is open, else the
    window's next opening."""
    return moment if window_open(campaign, moment) else next_opening(campaign, moment)


def _tenant_campaigns(tenant: Tenant) -> "pw.ModelSelect[Campaign]":
    return Campaign.select().where(Campaign.tenant == tenant)


def get_campaign(*, tenant: Tenant, campaign_id: str) -> Campaign:
    """The tenant's campaign, or NotFound (also for another tenant's)."""
    campaign = _tenant_campaigns(tenant).where(Campaign.id == campaign_id).first()
    if campaign is None:
        raise NotFound(f"Campaign {campaign_id} not found.")
    return campaign


def list_campaigns(*, tenant: Tenant, limit: int, offset: int) -> Page:
    """The tenant's campaigns, newest first."""
    query = _tenant_campaigns(tenant).order_by(Campaign.created_at.desc(), Campaign.id.desc())
    return paginate(query, limit=limit, offset=offset)


def list_contacts(
    *, tenant: Tenant, campaign_id: str, limit: int, offset: int, status: str | None = None
) -> Page:
    """The campaign's contacts in the order given (only those in status), each with the ids
    of its calls, oldest first (call_ids): two queries."""
    campaign = get_campaign(tenant=tenant, campaign_id=campaign_id)
    query = CampaignContact.select().where(CampaignContact.campaign == campaign)
    total = None
    if status is not None:
        query = query.where(CampaignContact.status == status)
    else:
        total = campaign.total_count
    page = paginate(query.order_by(CampaignContact.seq), limit=limit, offset=offset, total=total)
    calls: dict[str, list[str]] = {contact.id: [] for contact in page.items}
    if calls:
        rows = (
            Call.select(Call.id, Call.contact)
            .where(Call.contact.in_(list(calls)))
            .order_by(Call.queued_at, Call.id)
            .tuples()
        )
        for call_id, contact_id in cast(list[tuple[str, str]], list(rows)):
            calls[contact_id].append(call_id)
    for contact in page.items:
        contact.call_ids = calls[contact.id]
    return page


def create_campaign(
    *,
    tenant: Tenant,
    actor: audit.Actor,
    name: str,
    phone_number_id: str,
    contacts: list[Contact],
    agent_id: str | None = None,
    max_concurrent_calls: int = 1,
    schedule: dict[str, Any] | None = None,
    retry: dict[str, Any] | None = None,
    whatsapp: dict[str, Any] | None = None,
    permission_wait_hours: int = 24,
) -> Campaign:
    """Create a running campaign with its contacts, all due at once (the sweep places them).

    The number and agent are checked as for one outbound call (404, 409 no_agent); the
    tenant needs available credit (409 no_credits); maxConcurrentCalls is at most the
    tenant's concurrent-call limit (422); the contacts at most the setting's cap, the tenant's
    running and paused campaigns fewer than theirs (409 limit_reached); a contact's variables
    may not fill the session past its size (422). schedule and retry are validated by the
    API's schema. whatsapp ({"requestPermission", "text"?, "template"?}) is for a WhatsApp
    number only (422 otherwise).
    """
    limits.check_contacts(len(contacts))
    number, agent = outbound_calls.outbound_line(
        tenant=tenant, phone_number_id=phone_number_id, agent_id=agent_id
    )
    if whatsapp is not None and number.channel != "whatsapp":
        raise ValidationFailed(
            "Invalid value for whatsapp.",
            details={
                "whatsapp": [
                    f"Phone number {number.id} is not a WhatsApp number: leave whatsapp out."
                ]
            },
        )
    talking = outbound_calls.placing_version(number, agent)
    for index, contact in enumerate(contacts):
        if contact.variables:
            admission.check_session_size(
                talking.system_prompt, talking.greeting_text, contact.variables, index=index
            )
    ceiling = tenant_service.concurrent_call_limit_of(tenant)
    if max_concurrent_calls > ceiling:
        raise ValidationFailed(
            "Invalid value for maxConcurrentCalls.",
            details={
                "maxConcurrentCalls": [
                    f"At most the tenant's concurrent-call limit, {ceiling}, not "
                    f"{max_concurrent_calls}."
                ]
            },
        )
    retry = retry or {}
    now = utcnow()
    campaign_id = new_id("cmp")
    campaign = Campaign(
        id=campaign_id,
        tenant=tenant,
        name=name,
        phone_number=number.id,
        agent=agent.id,
        status="running",
        max_concurrent_calls=max_concurrent_calls,
        timezone=schedule["timezone"] if schedule else None,
        days=list(schedule.get("days") or DAYS) if schedule else None,
        window_start=schedule["start"] if schedule else None,
        window_end=schedule["end"] if schedule else None,
        max_attempts=retry.get("max_attempts", 1),
        retry_delay_minutes=retry.get("delay_minutes", 60),
        retry_on=list(retry.get("on", campaign_progress.DEFAULT_RETRY_ON)),
        total_count=len(contacts),
        pending_count=len(contacts),
        permission_wait_hours=permission_wait_hours,
        whatsapp=_whatsapp_settings(whatsapp),
        created_at=now,
        updated_at=now,
    )
    campaign.due_at = due_from(campaign, now)
    with unit_of_work():
        limits.check(tenant.id, "campaigns")
        outbound_calls.check_available_credit(tenant.id)
        campaign.save(force_insert=True)
        rows = [
            {
                "id": new_id("cct"),
                "campaign": campaign_id,
                "seq": seq,
                "to_number": contact.to,
                "variables": contact.variables,
                "status": "pending",
                "next_attempt_at": now,
                "updated_at": now,
            }
            for seq, contact in enumerate(contacts, start=1)
        ]
        for start in range(0, len(rows), CONTACTS_PER_INSERT):
            CampaignContact.insert_many(rows[start : start + CONTACTS_PER_INSERT]).execute()
        audit.write(
            actor,
            tenant_id=tenant.id,
            action="campaign.created",
            target_id=campaign_id,
            details={"contacts": len(contacts)},
        )
    return Campaign.get_by_id(campaign_id)


def _whatsapp_settings(given: dict[str, Any] | None) -> dict[str, Any] | None:
    """The campaign's whatsapp settings as stored and shown: requestPermission, and the
    request's text or template when given."""
    if given is None:
        return None
    settings: dict[str, Any] = {"requestPermission": bool(given.get("request_permission"))}
    if given.get("text") is not None:
        settings["text"] = given["text"]
    if given.get("template") is not None:
        settings["template"] = dict(given["template"])
    return settings


def _lock_tenant(tenant_id: str) -> None:
    """Lock the tenant's row first (PostgreSQL), as every step that ends a call does before
    it locks a campaign: one order, no two transactions waiting on each other."""
    if not is_sqlite():
        Tenant.select(Tenant.id).where(Tenant.id == tenant_id).for_update().execute()


# action: (the statuses it applies to, the status it leads to, how a sentence says it).
TRANSITIONS = {
    "paused": (("running",), "paused", "paused"),
    "resumed": (("paused",), "running", "resumed"),
    "canceled": (("running", "paused"), "canceled", "canceled"),
}


def _transition(*, tenant: Tenant, actor: audit.Actor, campaign_id: str, action: str) -> Campaign:
    sources, target, verb = TRANSITIONS[action]
    with unit_of_work():
        campaign = get_campaign(tenant=tenant, campaign_id=campaign_id)
        _lock_tenant(tenant.id)
        locked = campaign_progress.lock(campaign.id)
        assert locked is not None  # campaigns are never deleted while their tenant lives
        if locked.status == target:
            return locked  # a repeat changes nothing
        if locked.status not in sources:
            raise Conflict(
                f"A campaign that is {locked.status} cannot be {verb}.",
                code="illegal_transition",
                details={"status": locked.status},
            )
        now = utcnow()
        # Running again: due as its window says (the sweep skipped it while paused).
        due = due_from(locked, now) if target == "running" else locked.due_at
        Campaign.update(status=target, due_at=due, updated_at=now).where(
            Campaign.id == campaign.id
        ).execute()
        if target == "canceled":
            outbound_calls.cancel_campaign_calls(campaign_id=campaign.id)
        audit.write(actor, tenant_id=tenant.id, action=f"campaign.{action}", target_id=campaign.id)
    return Campaign.get_by_id(campaign.id)


def pause_campaign(*, tenant: Tenant, actor: audit.Actor, campaign_id: str) -> Campaign:
    """running → paused: no new calls are placed; its queued and live calls go on."""
    return _transition(tenant=tenant, actor=actor, campaign_id=campaign_id, action="paused")


def resume_campaign(*, tenant: Tenant, actor: audit.Actor, campaign_id: str) -> Campaign:
    """paused → running."""
    return _transition(tenant=tenant, actor=actor, campaign_id=campaign_id, action="resumed")


def cancel_campaign(*, tenant: Tenant, actor: audit.Actor, campaign_id: str) -> Campaign:
    """running or paused → canceled, with its queued calls (their contacts stay pending: never
    reached); calls already ringing or answered go on to their end."""
    return _transition(tenant=tenant, actor=actor, campaign_id=campaign_id, action="canceled")


def _due_again(campaign_id: str, due_at: datetime) -> None:
    Campaign.update(due_at=due_at).where(Campaign.id == campaign_id).execute()


def _next_retry(campaign_id: str) -> datetime | None:
    """When the campaign's first pending contact is due (none due now: its retries wait)."""
    return cast(
        datetime | None,
        CampaignContact.select(pw.fn.MIN(CampaignContact.next_attempt_at))
        .where((CampaignContact.campaign == campaign_id) & (CampaignContact.status == "pending"))
        .scalar(),
    )


def _place(campaign_id: str, tenant_id: str, now: datetime) -> int:
    """Queue the calls of the campaign's due contacts, as many as it has room for; how many.
    Its due_at moves on: to its window's next opening, its next retry, or now (served)."""
    with transaction():
        _lock_tenant(tenant_id)
        campaign = campaign_progress.lock(campaign_id)
        if campaign is None or campaign.status != "running":
            return 0
        room = campaign.max_concurrent_calls - campaign.in_progress_count
        if room <= 0 or not campaign.pending_count:
            return 0
        if not window_open(campaign, now):
            _due_again(campaign_id, next_opening(campaign, now))
            return 0
        number = PhoneNumber.get_or_none(PhoneNumber.id == campaign.phone_number_id)
        if number is None or campaign.agent_id is None:
            _due_again(campaign_id, now)  # to the back of its tenant's turn
            return 0
        due = cast(
            list[tuple[str, str, dict[str, str]]],
            list(
                CampaignContact.select(
                    CampaignContact.id, CampaignContact.to_number, CampaignContact.variables
                )
                .where(
                    (CampaignContact.campaign == campaign_id)
                    & (CampaignContact.status == "pending")
                    & (CampaignContact.next_attempt_at <= now)
                )
                .order_by(CampaignContact.next_attempt_at, CampaignContact.seq)
                # On a WhatsApp number contacts without permission use no room: look at more.
                .limit(
                    room
                    if number.channel != "whatsapp"
                    else max(room, campaign_permissions.PERMISSION_BATCH)
                )
                .tuples()
            ),
        )
        if not due:
            _due_again(campaign_id, _next_retry(campaign_id) or now)
            return 0
        awaiting: list[str] = []
        if number.channel == "whatsapp":
            allowed = permissions.allowed(number.id, [to for _, to, _ in due], now)
            awaiting = [contact_id for contact_id, to, _ in due if to not in allowed]
            due = [contact for contact in due if contact[1] in allowed][:room]
            campaign_permissions.await_permission(campaign_id, awaiting, now)
        if not due:
            _due_again(campaign_id, now)  # the others may be due: to the back of the turn
            return 0
        CampaignContact.update(
            status="in_progress",
            attempts=CampaignContact.attempts + 1,
            next_attempt_at=None,
            updated_at=now,
        ).where(CampaignContact.id.in_([contact_id for contact_id, _, _ in due])).execute()
        outbound_calls.queue_calls(
            tenant_id=tenant_id,
            outbounds=[
                outbound_calls.Outbound(
                    phone_number_id=number.id,
                    caller_number=number.display_number,
                    agent_id=campaign.agent_id,
                    to=to,
                    variables=variables,
                    campaign_id=campaign_id,
                    contact_id=contact_id,
                )
                for contact_id, to, variables in due
            ],
            now=now,
        )
        # Room left and contacts left: none of them is due yet.
        left = campaign.pending_count - len(due) - len(awaiting)
        waiting = len(due) + len(awaiting) < room and left > 0
        Campaign.update(
            {
                Campaign.in_progress_count: Campaign.in_progress_count + len(due),
                Campaign.pending_count: Campaign.pending_count - len(due),
                Campaign.due_at: (_next_retry(campaign_id) if waiting else None) or now,
                Campaign.updated_at: now,
            }
        ).where(Campaign.id == campaign_id).execute()
    return len(due)


def _due_campaigns(now: datetime) -> list[tuple[str, str]]:
    """The (id, tenant id) of up to SWEEP_CAMPAIGNS running campaigns due at now with room
    and pending contacts (the index on status, due_at finds them): each tenant's first
    before any tenant's second, and so on, each tenant's least recently served first."""
    due = (
        (Campaign.status == "running")
        & (Campaign.due_at <= now)
        & (Campaign.pending_count > 0)
        & (Campaign.in_progress_count < Campaign.max_concurrent_calls)
    )
    served = [Campaign.due_at, Campaign.created_at, Campaign.id]
    turn = pw.fn.ROW_NUMBER().over(partition_by=[Campaign.tenant], order_by=served)
    ranked = Campaign.select(
        Campaign.id, Campaign.tenant, Campaign.due_at, Campaign.created_at, turn.alias("turn")
    ).where(due)
    rows = (
        pw.Select(from_list=[ranked.alias("due")], columns=[pw.SQL("id"), pw.SQL("tenant_id")])
        .order_by(*(pw.SQL(name) for name in ("turn", "due_at", "created_at", "id")))
        .limit(SWEEP_CAMPAIGNS)
        .bind(Campaign._meta.database)
        .tuples()
    )
    return cast(list[tuple[str, str]], list(rows))


def place_due(*, now: datetime | None = None) -> int:
    """The sweep: queue the calls of the due campaigns' due contacts that their windows and
    their room allow, one transaction per campaign; how many calls were queued."""
    now = now or utcnow()
    campaign_permissions.serve_waits(now)
    return sum(_place(campaign, tenant, now) for campaign, tenant in _due_campaigns(now))
