"""Audit log: entries written in the change's transaction, listed newest first per tenant,
and counted by action for one email or one address (the sign-in throttle)."""

import re
from datetime import timedelta

import pytest

from app.db import database
from app.models import AuditEntry, Tenant
from app.services import audit
from app.util import utcnow
from tests.helpers import captured_queries

FAILED = "user.sign_in_failed"


@pytest.fixture
def tenant(tenant):
    """The tenant with an empty audit log (its creation's entry removed): these tests count."""
    AuditEntry.delete().where(AuditEntry.tenant == tenant).execute()
    return tenant


@pytest.fixture
def other_tenant(other_tenant):
    AuditEntry.delete().where(AuditEntry.tenant == other_tenant).execute()
    return other_tenant


def entry(tenant, **fields):
    values = {
        "tenant_id": tenant.id,
        "action": "key.created",
        "actor_type": "cli",
        "actor_label": "CLI",
        **fields,
    }
    return audit.record(**values)


def test_record_writes_every_field(tenant):
    written = audit.record(
        tenant_id=tenant.id,
        action="agent.updated",
        target_id="agent_1",
        actor_type="user",
        actor_id="usr_1",
        actor_label="owner@acme.test",
        address="192.0.2.7",
        details={"fields": ["name"]},
    )
    stored = AuditEntry.get_by_id(written.id)
    assert re.fullmatch(r"aud_[a-z0-9]{20}", stored.id)
    assert (stored.tenant_id, stored.action, stored.target_id) == (
        tenant.id,
        "agent.updated",
        "agent_1",
    )
    assert (stored.actor_type, stored.actor_id, stored.actor_label, stored.address) == (
        "user",
        "usr_1",
        "owner@acme.test",
        "192.0.2.7",
    )
    assert stored.details == {"fields": ["name"]}
    assert utcnow() - stored.created_at < timedelta(seconds=5)


def test_record_defaults_to_empty_details(tenant):
    stored = AuditEntry.get_by_id(entry(tenant).id)
    assert (stored.details, stored.target_id, stored.actor_id, stored.address) == (
        {},
        None,
        None,
        None,
    )


def test_record_rolls_back_with_the_change_it_records(tenant):
    with pytest.raises(RuntimeError), database.atomic():
        Tenant.update(low_balance_threshold=99).where(Tenant.id == tenant.id).execute()
        entry(tenant, action="tenant.threshold_changed")
        raise RuntimeError("the change failed")
    assert AuditEntry.select().count() == 0
    assert Tenant.get_by_id(tenant.id).low_balance_threshold == 10


def test_record_refuses_an_unknown_actor_type(tenant):
    with pytest.raises(ValueError, match="actor_type"):
        entry(tenant, actor_type="robot")


@pytest.mark.parametrize("name", ["key", "password", "secret", "signingSecret", "token"])
def test_record_refuses_details_that_would_hold_a_secret(tenant, name):
    with pytest.raises(ValueError, match="never hold secrets"):
        entry(tenant, details={name: "x"})
    assert AuditEntry.select().count() == 0


def test_list_entries_is_newest_first_and_paginated(tenant):
    base = utcnow()
    ids = []
    for minutes in range(5):
        written = entry(tenant, target_id=f"key_{minutes}")
        AuditEntry.update(created_at=base + timedelta(minutes=minutes)).where(
            AuditEntry.id == written.id
        ).execute()
        ids.append(written.id)
    page = audit.list_entries(tenant=tenant, limit=2, offset=0)
    assert [item.id for item in page.items] == [ids[4], ids[3]]
    assert (page.total, page.limit, page.offset, page.has_more) == (5, 2, 0, True)
    last = audit.list_entries(tenant=tenant, limit=2, offset=4)
    assert [item.id for item in last.items] == [ids[0]] and not last.has_more


def test_list_entries_breaks_ties_by_id(tenant):
    at = utcnow()
    written = [entry(tenant).id for _ in range(3)]
    AuditEntry.update(created_at=at).execute()
    page = audit.list_entries(tenant=tenant, limit=10, offset=0)
    assert [item.id for item in page.items] == sorted(written, reverse=True)


def test_list_entries_shows_only_the_tenants_own(tenant, other_tenant):
    mine = entry(tenant)
    entry(other_tenant)
    page = audit.list_entries(tenant=tenant, limit=10, offset=0)
    assert [item.id for item in page.items] == [mine.id] and page.total == 1


def test_entries_go_with_their_tenant(tenant):
    entry(tenant)
    Tenant.delete().where(Tenant.id == tenant.id).execute()
    assert AuditEntry.select().count() == 0


def test_count_recent_counts_one_email_or_one_address_since_then(tenant, other_tenant):
    since = utcnow() - timedelta(minutes=15)

    def failure(owner, email, address):
        entry(owner, action=FAILED, actor_type="user", actor_label=email, address=address)

    failure(tenant, "a@acme.test", "192.0.2.1")
    failure(tenant, "a@acme.test", "192.0.2.2")
    failure(other_tenant, "b@globex.test", "192.0.2.1")
    entry(tenant, action="user.signed_in", actor_type="user", actor_label="a@acme.test")
    old = entry(tenant, action=FAILED, actor_type="user", actor_label="a@acme.test")
    AuditEntry.update(created_at=since - timedelta(seconds=1)).where(
        AuditEntry.id == old.id
    ).execute()

    assert audit.count_recent(action=FAILED, since=since, email="a@acme.test") == 2
    assert audit.count_recent(action=FAILED, since=since, address="192.0.2.1") == 2
    assert audit.count_recent(action=FAILED, since=since, address="192.0.2.9") == 0
    assert (
        audit.count_recent(action=FAILED, since=since, email="a@acme.test", address="192.0.2.2")
        == 1
    )


def test_count_recent_finds_an_email_too_long_to_store_whole(tenant):
    email = "x" * 300 + "@acme.test"
    entry(tenant, action=FAILED, actor_type="user", actor_label=email)
    assert len(AuditEntry.get().actor_label) == 255
    since = utcnow() - timedelta(minutes=15)
    assert audit.count_recent(action=FAILED, since=since, email=email) == 1


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("filters", "index"),
    [
        ({"email": "a@acme.test"}, "auditentry_action_actor_label_created_at"),
        ({"address": "192.0.2.1"}, "auditentry_action_address_created_at"),
    ],
)
def test_count_recent_reads_an_index(app, filters, index):
    with captured_queries() as statements:
        audit.count_recent(action=FAILED, since=utcnow(), **filters)
    [statement] = statements
    plan = database.execute_sql("EXPLAIN QUERY PLAN " + statement.sql, statement.params)
    details = " ".join(str(row[-1]) for row in plan)
    assert f"USING COVERING INDEX {index}" in details, details
