"""Without Redis the web process's inline runner sweeps: a campaign progresses with no
worker."""

import time

import pytest

from app.models import Call
from app.services import phone_numbers as number_service
from tests.campaigns import created, numbers


@pytest.fixture
def app_config(app_config):
    return {**app_config, "SWEEP_INTERVAL": 0.1}


def test_the_inline_runner_places_a_campaign_without_redis(client, headers, tenant, did):
    (number,) = number_service.list_numbers(tenant=tenant)
    campaign_id = created(client, headers, number.id, numbers(2), maxConcurrentCalls=2)
    deadline = time.monotonic() + 10
    placed = Call.select().where(Call.campaign == campaign_id)
    while placed.count() < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [call.status for call in placed] == ["queued", "queued"]
