"""Billing: usage rounding, and the balance always equal to the ledger's sum."""

import itertools
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from peewee import fn

from app.errors import AppError
from app.models import AuditEntry, Call, CreditTransaction, Event, Tenant
from app.services import agents as agent_service
from app.services import billing
from app.services import phone_numbers as number_service
from app.services import tenants as tenant_service
from app.services.calls import lifecycle as call_lifecycle
from app.util import utcnow
from tests.helpers import ACTOR


@pytest.mark.parametrize(
    ("seconds", "minutes"), [(0, 0), (1, 1), (59, 1), (60, 1), (61, 2), (3600, 60), (3601, 61)]
)
def test_usage_minutes_counts_every_started_minute(seconds, minutes):
    assert billing.usage_minutes(seconds) == minutes


def test_charge_of_zero_minutes_writes_nothing(app, tenant):
    assert billing.charge_call(tenant_id=tenant.id, call_id="call_x", minutes=0) is None
    assert CreditTransaction.select().count() == 0


def test_a_movement_records_the_balance_it_left(app, tenant):
    billing.grant(tenant=tenant, actor=ACTOR, minutes=10)
    entry = billing.adjust(tenant=tenant, actor=ACTOR, minutes=-3, note="Goodwill")
    assert entry.balance_after == 7
    stored = CreditTransaction.get_by_id(entry.id)
    assert (stored.type, stored.minutes, stored.balance_after, stored.description) == (
        "adjustment",
        -3,
        7,
        "Goodwill",
    )
    tenant = Tenant.get_by_id(tenant.id)
    assert (tenant.balance_minutes, tenant.lifetime_purchased_minutes) == (7, 10)
    assert tenant.lifetime_used_minutes == 0


def test_an_adjustment_writes_its_audit_entry_and_no_credits_low(app, tenant):
    billing.grant(tenant=tenant, actor=ACTOR, minutes=20)
    entry = billing.adjust(tenant=tenant, actor=ACTOR, minutes=-15)
    assert entry.description == "Adjusted by -15 minutes"
    audit_entry = AuditEntry.get(AuditEntry.action == "credits.adjusted")
    assert (audit_entry.tenant_id, audit_entry.target_id) == (tenant.id, entry.id)
    assert not Event.select().where(Event.type == "credits.low").exists()


def test_an_adjustment_of_no_minutes_is_refused(app, tenant):
    with pytest.raises(AppError) as raised:
        billing.adjust(tenant=tenant, actor=ACTOR, minutes=0)
    assert raised.value.status == 422
    assert CreditTransaction.select().count() == 0


def test_moving_minutes_of_no_tenant_writes_nothing(app):
    with pytest.raises(AppError) as raised:
        billing.adjust(tenant=Tenant(id="tnt_none"), actor=ACTOR, minutes=5)
    assert raised.value.status == 404
    assert CreditTransaction.select().count() == 0
    assert not AuditEntry.select().where(AuditEntry.action == "credits.adjusted").exists()


_numbers = itertools.count(6221_5550_000)

grants = st.tuples(st.just("grant"), st.integers(1, 30))
calls = st.tuples(
    st.sampled_from(["ended", "dropped", "failed"]),
    st.integers(0, 40 * 60),  # up to 40 minutes: often more than the balance left
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    steps=st.lists(st.one_of(grants, calls), min_size=1, max_size=12), threshold=st.integers(0, 20)
)
def test_balance_always_equals_the_ledger_sum(app, steps, threshold):
    tenant = tenant_service.create_tenant(actor=ACTOR, name=f"t{next(_numbers)}")
    tenant_service.set_threshold(actor=ACTOR, tenant=tenant, minutes=threshold)
    agent = agent_service.create_agent(actor=ACTOR, tenant=tenant, name="A", system_prompt="x")
    number = number_service.add_number(
        actor=ACTOR, tenant=tenant, display_number=f"+{next(_numbers)}"
    )
    number_service.assign_agent(actor=ACTOR, tenant=tenant, number_id=number.id, agent_id=agent.id)
    used = purchased = crossings = 0
    for kind, amount in steps:
        balance = Tenant.get_by_id(tenant.id).balance_minutes
        if kind == "grant":
            billing.grant(actor=ACTOR, tenant=tenant, minutes=amount)
            purchased += amount
        else:
            try:
                call = call_lifecycle.start_call(
                    did=number.display_number,
                    caller_number="+628123456",
                    started_at=utcnow() - timedelta(seconds=amount),  # as long ago as it lasts
                )
            except AppError as error:
                assert balance <= 0 and error.code == "no_credits"
                continue
            assert balance > 0
            call_lifecycle.answer_call(call_id=call.call.id)
            ended = call_lifecycle.end_call(
                call_id=call.call.id,
                status=kind,
                duration_seconds=amount,
                talk_time_seconds=amount,
                hangup_reason="normal",
                hangup_initiator="caller",
                ai_cost_idr=0,
            )
            assert ended.billed_minutes == -(-amount // 60)
            used += ended.billed_minutes
            after = balance - ended.billed_minutes
            crossings += ended.billed_minutes > 0 and balance >= threshold > after

        stored = Tenant.get_by_id(tenant.id)
        ledger = CreditTransaction.select().where(CreditTransaction.tenant == tenant)
        assert stored.balance_minutes == (
            ledger.select(fn.SUM(CreditTransaction.minutes)).scalar() or 0
        )
        assert stored.balance_minutes == purchased - used
        assert (stored.lifetime_purchased_minutes, stored.lifetime_used_minutes) == (
            purchased,
            used,
        )
        last = ledger.order_by(
            CreditTransaction.created_at.desc(), CreditTransaction.id.desc()
        ).first()
        assert last is None or last.balance_after == stored.balance_minutes
    lows = Event.select().where((Event.tenant == tenant) & (Event.type == "credits.low"))
    assert lows.count() == crossings
    billed = Call.select(fn.SUM(Call.billed_minutes)).where(Call.tenant == tenant).scalar() or 0
    assert billed == used
