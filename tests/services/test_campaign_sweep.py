"""The campaign sweep is fair (DESIGN.md section 15): it selects only due campaigns, so those
whose window is closed hide no others, and takes the tenants in turn."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from app.models import Call, Campaign
from app.services import agents as agent_service
from app.services import billing
from app.services import campaigns as campaign_service
from app.services import phone_numbers as number_service
from app.util import utcnow
from tests.campaigns import claim, created, numbers, sweep, unanswered, zone_at_hour
from tests.helpers import ACTOR, captured_queries

OTHER_DID = "+6221555011"


@pytest.fixture
def number_id(did, tenant):
    (number,) = number_service.list_numbers(tenant=tenant)
    return number.id


@pytest.fixture
def other_number_id(other_tenant):
    agent = agent_service.create_agent(
        actor=ACTOR, tenant=other_tenant, name="Desk", system_prompt="Be brief."
    )
    number = number_service.add_number(
        actor=ACTOR, tenant=other_tenant, display_number=OTHER_DID, label="Main"
    )
    number_service.assign_agent(
        actor=ACTOR, tenant=other_tenant, number_id=number.id, agent_id=agent.id
    )
    billing.grant(actor=ACTOR, tenant=other_tenant, minutes=100)
    return number.id


def campaign(tenant, number_id, count=1, schedule=None, first=0) -> Campaign:
    return campaign_service.create_campaign(
        tenant=tenant,
        actor=ACTOR,
        name="Reminders",
        phone_number_id=number_id,
        contacts=[campaign_service.Contact(to=to, variables={}) for to in numbers(count, first)],
        schedule=schedule,
    )


def placed(campaign_id) -> int:
    return Call.select().where(Call.campaign == campaign_id).count()


def test_campaigns_whose_window_is_closed_keep_no_other_tenants_campaign_waiting(
    app, tenant, number_id, other_tenant, other_number_id
):
    app.config["MAX_CAMPAIGNS_PER_TENANT"] = 200
    closed = {"timezone": zone_at_hour(3), "start": "09:00", "end": "09:01"}  # 03:xx there
    for index in range(200):
        campaign(tenant, number_id, schedule=closed, first=index)
    newcomer = campaign(other_tenant, other_number_id, first=1000)
    with captured_queries() as statements:
        assert sweep() == 1
    assert placed(newcomer.id) == 1
    assert Call.select().count() == 1
    # One query selects the due campaign; the closed ones cost nothing, not even a look.
    assert len(statements) < 15, [each.sql for each in statements]


def test_a_closed_campaign_is_due_when_its_window_opens_and_placed_then(
    tenant, number_id, other_tenant, other_number_id
):
    now = utcnow()
    zone = zone_at_hour(12, now)
    local = now.replace(tzinfo=UTC).astimezone(ZoneInfo(zone))
    tomorrow = campaign_service.DAYS[(local.weekday() + 1) % 7]
    schedule = {"timezone": zone, "days": [tomorrow], "start": "09:00", "end": "17:00"}
    waiting = campaign(tenant, number_id, schedule=schedule)
    opening = datetime.combine(local.date() + timedelta(days=1), datetime.min.time()).replace(
        hour=9, tzinfo=ZoneInfo(zone)
    )
    opening = opening.astimezone(UTC).replace(tzinfo=None)
    assert Campaign.get_by_id(waiting.id).due_at == opening
    assert sweep(now) == 0
    assert sweep(opening - timedelta(minutes=1)) == 0
    assert sweep(opening) == 1
    assert placed(waiting.id) == 1


def test_a_window_found_closed_by_the_sweep_is_looked_at_again_when_it_opens(tenant, number_id):
    now = utcnow()
    schedule = {"timezone": zone_at_hour(12, now), "start": "09:00", "end": "17:00"}
    late = campaign(tenant, number_id, count=2, schedule=schedule)
    evening = now + timedelta(hours=6)  # 18:xx: closed since 17:00
    assert sweep(evening) == 0
    due_at = Campaign.get_by_id(late.id).due_at
    assert due_at is not None and due_at > evening
    with captured_queries() as statements:
        assert sweep(due_at - timedelta(seconds=1)) == 0
    # The campaigns with contacts awaiting call permission, then the due campaigns: no more.
    assert len(statements) == 2
    assert sweep(due_at) == 1


def test_the_sweep_takes_the_tenants_in_turn(
    monkeypatch, tenant, number_id, other_tenant, other_number_id
):
    monkeypatch.setattr(campaign_service, "SWEEP_CAMPAIGNS", 2)
    many = [campaign(tenant, number_id, count=2, first=10 * index) for index in range(3)]
    lone = campaign(other_tenant, other_number_id, first=1000)
    assert sweep() == 2
    # The other tenant's one campaign had its turn before the first tenant's second.
    assert [placed(each.id) for each in many] == [1, 0, 0]
    assert placed(lone.id) == 1
    assert sweep() == 2  # the least recently served next
    assert [placed(each.id) for each in many] == [1, 1, 1]


def test_a_retry_makes_its_campaign_due_at_the_retrys_time(
    client, headers, runtime_headers, number_id
):
    retry = {"maxAttempts": 2, "delayMinutes": 10, "on": ["busy"]}
    campaign_id = created(client, headers, number_id, numbers(1), retry=retry)
    sweep()
    (call,) = claim(client, runtime_headers)
    unanswered(client, runtime_headers, call["id"], "busy")
    ended_at = Call.get_by_id(call["id"]).ended_at
    assert sweep() == 0  # nothing due: the campaign waits for its retry
    assert Campaign.get_by_id(campaign_id).due_at == ended_at + timedelta(minutes=10)
    assert sweep(ended_at + timedelta(minutes=10)) == 1
