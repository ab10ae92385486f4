"""A campaign survives its worker: a real worker.py (whose sweep places the campaign's calls) is
SIGKILLed again and again mid-campaign and started again, while the test plays the runtime
(claims, answers and ends every call at once). Every contact is reached exactly once: none
lost, none called twice, because a contact is claimed in the transaction that queues its
call, in the database, not in Redis."""

import time
from collections import Counter

import pytest

from app.models import Call, Campaign, CampaignContact
from app.services import phone_numbers as number_service
from app.services import tenants as tenant_service
from app.services.calls import constants as call_constants
from app.services.calls import lifecycle as call_lifecycle
from app.services.calls import outbound as outbound_calls
from tests.campaigns import created, numbers
from tests.helpers import ACTOR
from tests.system.workers import rq_config, wait_for_worker

pytestmark = pytest.mark.slow

CONTACTS = 60
KILLS = 4


@pytest.fixture
def app_config(app_config, redis_url, redis_client):
    return rq_config(app_config, redis_url)


def play_runtime(dialled: Counter) -> int:
    """Claim what is queued and run each call to its answered end; how many."""
    claimed = outbound_calls.dispatch(max_calls=call_constants.MAX_DISPATCH)
    for started in claimed:
        call = started.call
        dialled[call.callee_number] += 1
        call_lifecycle.answer_call(call_id=call.id)
        call_lifecycle.end_call(
            call_id=call.id,
            status="ended",
            duration_seconds=12,
            talk_time_seconds=10,
            hangup_reason="normal",
            hangup_initiator="caller",
            ai_cost_idr=0,
        )
    return len(claimed)


def test_a_worker_killed_mid_campaign_loses_no_contact_and_calls_none_twice(
    client, headers, tenant, did, workers, redis_client
):
    tenant_service.set_plan(actor=ACTOR, tenant=tenant, plan="business", concurrent_calls=10)
    (number,) = number_service.list_numbers(tenant=tenant)
    campaign_id = created(client, headers, number.id, numbers(CONTACTS), maxConcurrentCalls=5)
    dialled: Counter = Counter()
    done = lambda: Campaign.get_by_id(campaign_id).status == "completed"  # noqa: E731
    for kill in range(KILLS + 1):
        worker = workers.start(queues=("webhooks",))
        wait_for_worker(workers, redis_client, ("webhooks",))
        # Let it place a share of the campaign (a kill lands wherever its sweep is then).
        target = (kill + 1) * CONTACTS // (KILLS + 2)
        deadline = time.monotonic() + 60
        while sum(dialled.values()) < target and time.monotonic() < deadline:
            play_runtime(dialled)
            time.sleep(0.02)
        workers.kill(worker)
        play_runtime(dialled)  # what it queued before it died is still there
    worker = workers.start(queues=("webhooks",))
    deadline = time.monotonic() + 90
    while not done() and time.monotonic() < deadline:
        play_runtime(dialled)
        time.sleep(0.05)
    assert done(), workers.logs()
    assert dialled == Counter({to: 1 for to in numbers(CONTACTS)})
    contacts = CampaignContact.select().where(CampaignContact.campaign == campaign_id)
    assert {(contact.status, contact.attempts) for contact in contacts} == {("completed", 1)}
    placed = Call.select().where(Call.campaign == campaign_id)
    assert Counter(call.contact_id for call in placed) == Counter(
        {contact.id: 1 for contact in contacts}
    )
    campaign = Campaign.get_by_id(campaign_id)
    assert campaign.counts == {
        "total": CONTACTS,
        "pending": 0,
        "in_progress": 0,
        "completed": CONTACTS,
        "failed": 0,
        "awaiting_permission": 0,
    }
