"""The demo runtime: what it does to queued calls, step by step."""

from app.models import Call
from app.services import demo_runtime
from app.services import phone_numbers as number_service
from tests.campaigns import created, numbers, sweep


def test_a_step_answers_the_claimed_calls_and_the_next_ends_them(client, headers, tenant, did):
    (number,) = number_service.list_numbers(tenant=tenant)
    created(client, headers, number.id, numbers(2), maxConcurrentCalls=2)
    sweep()
    runtime = demo_runtime.DemoRuntime(max_calls=5, seconds=0, answer_rate=1, seed=None)
    first = list(runtime.step())  # the talk of 0 s is over at once
    assert [outcome.result for outcome in first] == ["answered", "answered", "ended", "ended"]
    assert {outcome.callee_number for outcome in first} == set(numbers(2))
    assert (list(runtime.step()), runtime.idle()) == ([], True)
    calls = Call.select()
    assert {(call.status, call.talk_time_seconds, call.duration_seconds) for call in calls} == {
        ("ended", 0, demo_runtime.RING_SECONDS)
    }


def test_an_unanswered_call_ends_at_once_with_a_reason_of_the_callee(client, headers, tenant, did):
    (number,) = number_service.list_numbers(tenant=tenant)
    created(client, headers, number.id, numbers(1), retry={"maxAttempts": 1})
    sweep()
    runtime = demo_runtime.DemoRuntime(max_calls=5, seconds=8, answer_rate=0, seed=7)
    (outcome,) = runtime.step()
    assert outcome.result in demo_runtime.UNANSWERED
    call = Call.get_by_id(outcome.call_id)
    assert (call.status, call.hangup_reason) == ("failed", outcome.result)
    assert runtime.idle()
