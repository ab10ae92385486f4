"""flask calls dispatch-demo: plays the runtime's part for queued calls, so a campaign
progresses with no runtime."""

from app.models import Call, Campaign
from app.services import phone_numbers as number_service
from tests.campaigns import contacts, created, numbers, sweep


def number_of(tenant):
    (number,) = number_service.list_numbers(tenant=tenant)
    return number.id


def test_the_demo_answers_and_ends_every_queued_call(runner, client, headers, tenant, did):
    campaign_id = created(client, headers, number_of(tenant), numbers(3), maxConcurrentCalls=3)
    sweep()
    args = ["calls", "dispatch-demo", "--once", "--seconds", "0", "--answer-rate", "1"]
    result = runner.invoke(args=[*args, "--interval", "0.05"])
    assert result.exit_code == 0, result.output
    assert result.output.count(": answered") == 3
    assert result.output.count(": ended after 0 s") == 3
    campaign = Campaign.get_by_id(campaign_id)
    assert (campaign.status, campaign.completed_count) == ("completed", 3)
    calls = Call.select().where(Call.campaign == campaign_id)
    assert {(call.status, call.hangup_reason) for call in calls} == {("ended", "normal")}
    assert all(call.transcript_summary for call in calls)


def test_an_unanswered_demo_call_ends_busy_or_without_answer(runner, client, headers, tenant, did):
    retry = {"maxAttempts": 1}
    campaign_id = created(
        client, headers, number_of(tenant), numbers(2), maxConcurrentCalls=2, retry=retry
    )
    sweep()
    args = ["calls", "dispatch-demo", "--once", "--answer-rate", "0", "--seed", "7"]
    result = runner.invoke(args=[*args, "--interval", "0.05"])
    assert result.exit_code == 0, result.output
    outcomes = {contact.last_outcome for contact in contacts(campaign_id)}
    assert outcomes <= {"busy", "no_answer"}
    assert Campaign.get_by_id(campaign_id).failed_count == 2


def test_with_nothing_queued_the_demo_stops_at_once(runner, did):
    result = runner.invoke(args=["calls", "dispatch-demo", "--once"])
    assert (result.exit_code, result.output) == (0, "")
