"""Ending a call: the duration it may report is bounded by the time it has lived."""

from datetime import timedelta

import pytest

from app.errors import ValidationFailed
from app.models import Call, CreditTransaction, Event, Tenant
from app.services.calls import lifecycle as call_lifecycle
from app.services.calls.constants import DURATION_ALLOWANCE_SECONDS
from app.util import utcnow
from tests.conftest import DID


def started(seconds_ago: float = 0) -> Call:
    """An answered call of DID that started seconds_ago."""
    when = utcnow() - timedelta(seconds=seconds_ago)
    call = call_lifecycle.start_call(did=DID, caller_number="+6281234567890", started_at=when)
    call_lifecycle.answer_call(call_id=call.call.id)
    return call.call


def end(call: Call, duration: int, talk: int = 0, status: str = "ended") -> Call:
    return call_lifecycle.end_call(
        call_id=call.id,
        status=status,
        duration_seconds=duration,
        talk_time_seconds=talk,
        hangup_reason="normal",
        hangup_initiator="caller",
        ai_cost_idr=0,
    )


def charged() -> int:
    return CreditTransaction.select().where(CreditTransaction.type == "usage").count()


def ended_events() -> int:
    return Event.select().where(Event.type == "call.ended").count()


def test_a_day_on_a_call_a_second_old_is_refused_and_changes_nothing(tenant, did):
    call = started(seconds_ago=1)
    before = Tenant.get_by_id(tenant.id).__data__
    with pytest.raises(ValidationFailed) as raised:
        end(call, 86_400, talk=86_400)
    assert raised.value.status == 422
    (message,) = raised.value.details["durationSeconds"]
    assert f"plus {DURATION_ALLOWANCE_SECONDS} s" in message and "(got 86,400)" in message
    assert Call.get_by_id(call.id).status == "answered"
    assert (charged(), ended_events()) == (0, 0)
    assert Tenant.get_by_id(tenant.id).__data__ == before


def test_the_age_plus_the_allowance_is_taken(tenant, did):
    call = started(seconds_ago=100)
    ended = end(call, 100 + DURATION_ALLOWANCE_SECONDS, talk=100)
    assert (ended.status, ended.duration_seconds, ended.billed_minutes) == ("ended", 160, 2)
    assert (charged(), ended_events()) == (1, 1)


def test_one_second_past_the_allowance_is_refused(tenant, did):
    call = started(seconds_ago=100)
    # A hundred seconds ago and a few moments: the call is not yet 101 s old.
    with pytest.raises(ValidationFailed):
        end(call, 101 + DURATION_ALLOWANCE_SECONDS + 5)
    assert Call.get_by_id(call.id).status == "answered"


def test_a_call_that_lived_a_day_may_report_a_day(tenant, did):
    call = started(seconds_ago=86_400)
    assert end(call, 86_400, talk=60).duration_seconds == 86_400


def test_a_repeat_of_the_end_stays_idempotent_however_long(tenant, did):
    call = started(seconds_ago=95)
    first = end(call, 95, talk=80)
    again = end(call, 86_400, talk=86_400)
    assert again.__data__ == Call.get_by_id(call.id).__data__ == first.__data__
    assert (charged(), ended_events()) == (1, 1)


def test_a_start_given_a_time_in_the_past_holds_credit_from_now(tenant, did):
    before = utcnow()
    call = started(seconds_ago=3_600)
    assert call.started_at < before - timedelta(minutes=59)
    assert call.reservation_expires_at > before + timedelta(minutes=call.reserved_minutes)
    event = Event.get((Event.type == "call.started") & (Event.call_id == call.id))
    assert event.created_at == call.started_at  # when it happened
