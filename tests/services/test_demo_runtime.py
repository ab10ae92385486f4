"""The demo runtime: what it does to queued calls, step by step."""

from app.models import Call
from app.services import demo_runtime
from app.services import phone_numbers as number_service
from tests.campaigns import created, numbers, sweep


def lived_for(call: Call) -> bool:
    """Whether the call reported the whole seconds it really lived (between the runtime's
    reading of the clock and the end's, a second may begin)."""
    age = (call.ended_at - call.started_at).total_seconds()
    return call.duration_seconds <= age < call.duration_seconds + 2


def test_a_step_answers_the_claimed_calls_and_the_next_ends_them(client, headers, tenant, did):
    (number,) = number_service.list_numbers(tenant=tenant)
    created(client, headers, number.id, numbers(2), maxConcurrentCalls=2)
    sweep()
    runtime = demo_runtime.DemoRuntime(max_calls=5, seconds=0, answer_rate=1, seed=None)
    first = list(runtime.step())  # the talk of 0 s is over at once
    assert [outcome.result for outcome in first] == ["answered", "answered", "ended", "ended"]
    assert {outcome.callee_number for outcome in first} == set(numbers(2))
    assert (list(runtime.step()), runtime.idle()) == ([], True)
    calls = list(Call.select())
    assert {(call.status, call.talk_time_seconds) for call in calls} == {("ended", 0)}
    for call in calls:  # the time the call has really lived, in whole seconds
        assert lived_for(call)


def test_an_unanswered_call_ends_at_once_with_a_reason_of_the_callee(client, headers, tenant, did):
    (number,) = number_service.list_numbers(tenant=tenant)
    created(client, headers, number.id, numbers(1), retry={"maxAttempts": 1})
    sweep()
    runtime = demo_runtime.DemoRuntime(max_calls=5, seconds=8, answer_rate=0, seed=7)
    (outcome,) = runtime.step()
    assert outcome.result in demo_runtime.UNANSWERED
    call = Call.get_by_id(outcome.call_id)
    assert (call.status, call.hangup_reason) == ("failed", outcome.result)
    assert lived_for(call)
    assert runtime.idle()
