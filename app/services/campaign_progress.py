"""Where a campaign's contacts stand once their calls end: completed, retried later or failed,
the campaign's counts, and campaign.completed when its last contact is done.

The calls service calls contact_done() in the transaction that ends a campaign's call (or
cancels it), so a contact's state, the campaign's counts and the call's end commit together:
a process killed in between leaves all of them as they were.
"""

from datetime import datetime, timedelta
from typing import Any, cast

from app.db import is_sqlite
from app.models import Call, Campaign, CampaignContact, Tenant
from app.services import events
from app.util import isoformat, utcnow

CAMPAIGN_STATUSES = ("running", "paused", "canceled", "completed")
# awaiting_permission: on a WhatsApp number, waiting for the user's call permission (no
# attempt used); it becomes pending when a grant arrives, or failed (lastOutcome
# no_permission) after the campaign's permissionWaitHours.
CONTACT_STATUSES = ("pending", "in_progress", "completed", "failed", "awaiting_permission")
# A contact's last outcome when its wait for the user's permission ran out.
NO_PERMISSION = "no_permission"
# Why an outbound call went unanswered (its hangupReason), as the runtime reports it.
UNANSWERED = ("no_answer", "busy", "voicemail")
# The outcomes a campaign may retry: those, and any other failure ("failed").
RETRY_OUTCOMES = (*UNANSWERED, "failed")
DEFAULT_RETRY_ON = ("no_answer", "busy")
# A contact's status and the campaign counter that counts it.
COUNTERS = {
    "pending": Campaign.pending_count,
    "in_progress": Campaign.in_progress_count,
    "completed": Campaign.completed_count,
    "failed": Campaign.failed_count,
    "awaiting_permission": Campaign.awaiting_permission_count,
}


def outcome(call: Call) -> str:
    """How a finished call went for its contact: completed (answered), canceled, one of
    UNANSWERED (its hangupReason), or failed (anything else: no credits, a lost runtime, …)."""
    if call.status == "canceled":
        return "canceled"
    if call.hangup_reason in UNANSWERED:
        return str(call.hangup_reason)
    if call.answered_at is not None:
        return "completed"
    return "failed"


def lock(campaign_id: str) -> Campaign | None:
    """The campaign, its row locked until the transaction ends (PostgreSQL: FOR UPDATE;
    SQLite's IMMEDIATE transaction holds the write lock already)."""
    query = Campaign.select().where(Campaign.id == campaign_id)
    if not is_sqlite():
        query = query.for_update()
    return query.first()


def _next_status(campaign: Campaign, contact: CampaignContact, result: str) -> str:
    if result == "completed":
        return "completed"
    if result == "canceled":
        # Withdrawn with its campaign: never reached. Withdrawn alone: the tenant gave it up.
        return "pending" if campaign.status == "canceled" else "failed"
    if result in campaign.retry_on and contact.attempts < campaign.max_attempts:
        return "pending"
    return "failed"


def contact_done(call: Call) -> None:
    """Move the call's contact on from in_progress, as the call's outcome says; call inside
    the transaction that finished the call (once per call: its end is a conditional UPDATE).

    A retried contact is due retry.delayMinutes after the call ended. The campaign's counts
    follow; when no contact is pending or in progress any more, the campaign is completed
    and emits campaign.completed.
    """
    if call.contact_id is None or call.campaign_id is None:
        return
    campaign = lock(call.campaign_id)
    contact = CampaignContact.get_or_none(CampaignContact.id == call.contact_id)
    if campaign is None or contact is None or contact.status != "in_progress":
        return
    result = outcome(call)
    status = _next_status(campaign, contact, result)
    now = utcnow()
    due: datetime | None = None
    if status == "pending" and campaign.status != "canceled":
        due = (call.ended_at or now) + timedelta(minutes=campaign.retry_delay_minutes)
    CampaignContact.update(
        status=status, last_outcome=result, next_attempt_at=due, updated_at=now
    ).where(CampaignContact.id == contact.id).execute()
    moved = COUNTERS[status]
    changes = {
        Campaign.in_progress_count: Campaign.in_progress_count - 1,
        moved: moved + 1,
        Campaign.updated_at: now,
    }
    if due is not None and campaign.due_at > due:
        # The sweep waits for the campaign's other retries or its window: this one is sooner.
        changes[Campaign.due_at] = due
    (updated,) = (
        Campaign.update(changes).where(Campaign.id == campaign.id).returning(Campaign).execute()
    )
    _complete_if_done(updated, now)


def release_awaiting(*, phone_number_id: str, user_number: str, now: datetime) -> int:
    """The user's contacts awaiting permission in the number's running or paused campaigns
    become pending and due at once (a grant arrived); how many. Call inside a transaction."""
    query = (
        CampaignContact.select(CampaignContact.campaign)
        .join(Campaign)
        .where(
            (Campaign.phone_number == phone_number_id)
            & Campaign.status.in_(("running", "paused"))
            & (CampaignContact.status == "awaiting_permission")
            & (CampaignContact.to_number == user_number)
        )
        .distinct()
        .order_by(CampaignContact.campaign)
        .tuples()
    )
    campaign_ids = [str(row[0]) for row in cast(list[tuple[str]], list(query))]
    released = 0
    for campaign_id in campaign_ids:
        campaign = lock_with_tenant(campaign_id)
        if campaign is None or campaign.status not in ("running", "paused"):
            continue
        count = (
            CampaignContact.update(
                status="pending", next_attempt_at=now, awaiting_since=None, updated_at=now
            )
            .where(
                (CampaignContact.campaign == campaign_id)
                & (CampaignContact.status == "awaiting_permission")
                & (CampaignContact.to_number == user_number)
            )
            .execute()
        )
        if count:
            Campaign.update(
                {
                    Campaign.awaiting_permission_count: Campaign.awaiting_permission_count - count,
                    Campaign.pending_count: Campaign.pending_count + count,
                    Campaign.due_at: now,
                    Campaign.updated_at: now,
                }
            ).where(Campaign.id == campaign_id).execute()
            released += count
    return released


def lock_with_tenant(campaign_id: str) -> Campaign | None:
    """The campaign locked after its tenant's row (PostgreSQL), the order every step that
    ends a call takes them in."""
    if not is_sqlite():
        tenant_id = Campaign.select(Campaign.tenant).where(Campaign.id == campaign_id).scalar()
        Tenant.select(Tenant.id).where(Tenant.id == tenant_id).for_update().execute()
    return lock(campaign_id)


def expire_waits(campaign_id: str, now: datetime) -> int:
    """The campaign's contacts that awaited permission longer than its permissionWaitHours
    end failed (lastOutcome no_permission); how many. Call inside a transaction."""
    campaign = lock_with_tenant(campaign_id)
    if campaign is None or campaign.status != "running":
        return 0
    cutoff = now - timedelta(hours=campaign.permission_wait_hours)
    count = (
        CampaignContact.update(
            status="failed", last_outcome=NO_PERMISSION, next_attempt_at=None, updated_at=now
        )
        .where(
            (CampaignContact.campaign == campaign_id)
            & (CampaignContact.status == "awaiting_permission")
            & (CampaignContact.awaiting_since <= cutoff)
        )
        .execute()
    )
    if count:
        (updated,) = (
            Campaign.update(
                {
                    Campaign.awaiting_permission_count: Campaign.awaiting_permission_count - count,
                    Campaign.failed_count: Campaign.failed_count + count,
                    Campaign.updated_at: now,
                }
            )
            .where(Campaign.id == campaign_id)
            .returning(Campaign)
            .execute()
        )
        _complete_if_done(updated, now)
    return count


def _complete_if_done(campaign: Campaign, now: datetime) -> None:
    """running or paused, with nothing pending, in progress or awaiting permission:
    completed, and its event."""
    if campaign.pending_count or campaign.in_progress_count or campaign.awaiting_permission_count:
        return
    if campaign.status not in ("running", "paused"):
        return
    Campaign.update(status="completed", completed_at=now, updated_at=now).where(
        Campaign.id == campaign.id
    ).execute()
    events.emit(
        tenant_id=campaign.tenant_id,
        type="campaign.completed",
        data=completed_data(campaign, now),
        occurred_at=now,
    )


def completed_data(campaign: Campaign, completed_at: datetime) -> dict[str, Any]:
    tally = campaign.counts
    return {
        "campaignId": campaign.id,
        "name": campaign.name,
        "counts": {
            "total": tally["total"],
            "pending": tally["pending"],
            "inProgress": tally["in_progress"],
            "completed": tally["completed"],
            "failed": tally["failed"],
        },
        "completedAt": isoformat(completed_at),
    }
