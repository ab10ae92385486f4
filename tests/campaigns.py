"""Driving campaigns in tests: create one, run the sweep, play the runtime's part."""

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from app.models import Campaign, CampaignContact
from app.services import campaigns as campaign_service
from app.util import utcnow
from tests.call_flow import RUNTIME, end_body, report_end

CAMPAIGNS = "/api/v1/campaigns"
DISPATCH = "/internal/v1/dispatch"


def numbers(count: int, first: int = 0) -> list[str]:
    return [f"+62813{index:08d}" for index in range(first, first + count)]


def create(client, headers, number_id, contacts, **fields):
    """POST /campaigns with these contacts (numbers, or {"to", "variables"} objects)."""
    body = {
        "name": fields.pop("name", "Reminders"),
        "phoneNumberId": number_id,
        "contacts": [
            contact if isinstance(contact, dict) else {"to": contact} for contact in contacts
        ],
        **fields,
    }
    return client.post(CAMPAIGNS, json=body, headers=headers)


def created(client, headers, number_id, contacts, **fields) -> str:
    response = create(client, headers, number_id, contacts, **fields)
    assert response.status_code == 201, response.get_data(as_text=True)
    return response.json["id"]


def sweep(now: datetime | None = None) -> int:
    return campaign_service.place_due(now=now)


def claim(client, runtime_headers, max_calls=50) -> list[dict]:
    """Claim queued calls as a runtime does: each call's fields, its session under "session"."""
    response = client.post(DISPATCH, json={"max": max_calls}, headers=runtime_headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    return [{**each["call"], "session": each["session"]} for each in response.json["calls"]]


def answered(client, runtime_headers, call_id, talk=30):
    """The callee answers and hangs up after talk seconds."""
    assert client.post(f"{RUNTIME}/{call_id}/answered", headers=runtime_headers).status_code == 200
    body = end_body(talkTimeSeconds=talk, durationSeconds=talk + 5)
    response = report_end(client, runtime_headers, call_id, body)
    assert response.status_code == 200, response.get_data(as_text=True)


def unanswered(client, runtime_headers, call_id, reason="no_answer"):
    body = end_body(
        status="failed",
        hangupReason=reason,
        hangupInitiator="callee",
        durationSeconds=25,
        talkTimeSeconds=0,
        aiCostIdr=0,
    )
    response = report_end(client, runtime_headers, call_id, body)
    assert response.status_code == 200, response.get_data(as_text=True)


def counts(campaign_id) -> dict:
    return Campaign.get_by_id(campaign_id).counts


def contacts(campaign_id) -> list[CampaignContact]:
    return list(
        CampaignContact.select()
        .where(CampaignContact.campaign == campaign_id)
        .order_by(CampaignContact.seq)
    )


def zone_at_hour(hour: int, now: datetime | None = None) -> str:
    """A fixed-offset time zone (Etc/GMT±N) whose clock shows hour now."""
    now = now or utcnow()
    for offset in range(-12, 15):
        name = f"Etc/GMT{-offset:+d}" if offset else "Etc/GMT"  # Etc/GMT-7 is UTC+7
        if (now + timedelta(hours=offset)).hour == hour:
            assert ZoneInfo(name).utcoffset(now) == timedelta(hours=offset)
            return name
    raise AssertionError(f"no zone shows {hour}:00 now")
