"""flask calls dispatch-demo: plays the runtime's part for queued calls, so a campaign
progresses with no runtime."""

from app.models import Call, CallTurn, Campaign
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


def test_an_outbound_demo_call_calls_out_by_the_name_its_variables_give(
    runner, client, headers, tenant, did
):
    contacts_ = [{"to": numbers(1)[0], "variables": {"name": "Budi"}}, numbers(1, 1)[0]]
    created(client, headers, number_of(tenant), contacts_, maxConcurrentCalls=2)
    sweep()
    args = ["calls", "dispatch-demo", "--once", "--seconds", "0", "--answer-rate", "1"]
    assert runner.invoke(args=[*args, "--interval", "0.05"]).exit_code == 0
    said = {}
    for call in Call.select():
        turns = CallTurn.select().where(CallTurn.call == call).order_by(CallTurn.seq)
        said[call.callee_number] = [turn.text for turn in turns]
    named, unnamed = said[numbers(1)[0]], said[numbers(1, 1)[0]]
    assert named[0].startswith("Halo Budi, saya menelepon dari")
    assert "Budi" in named[-2] and "Bapak/Ibu" in unnamed[0]
    assert not any("sudah menelepon" in text for text in named + unnamed)  # not an inbound call


def test_an_outbound_demo_call_opens_with_the_agents_filled_greeting(
    runner, client, headers, tenant, did, agent_id
):
    client.patch(
        f"/api/v1/agents/{agent_id}", json={"greetingText": "Halo {{name}}!"}, headers=headers
    )
    created(
        client, headers, number_of(tenant), [{"to": numbers(1)[0], "variables": {"name": "Sari"}}]
    )
    sweep()
    args = ["calls", "dispatch-demo", "--once", "--seconds", "0", "--answer-rate", "1"]
    assert runner.invoke(args=[*args, "--interval", "0.05"]).exit_code == 0
    first = CallTurn.select().order_by(CallTurn.seq).first()
    assert (first.role, first.text) == ("agent", "Halo Sari!")
