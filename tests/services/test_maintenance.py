"""Backups taken while the service writes, and pruning of old delivery logs and events."""

from datetime import timedelta

import pytest

from app.models import (
    Agent,
    AgentVersion,
    Call,
    Delivery,
    DeliveryAttempt,
    Event,
    FunctionDefinition,
    IdempotencyKey,
    Webhook,
)
from app.services import events, idempotency, maintenance
from app.util import new_id, utcnow

sqlite_only = pytest.mark.sqlite_only


@sqlite_only
def test_backup_refuses_to_overwrite(runner, tmp_path):
    target = tmp_path / "exists.db"
    target.write_text("x")
    result = runner.invoke(args=["db", "backup", str(target)])
    assert result.exit_code == 1 and "already exists" in result.output


@pytest.mark.postgres_only
def test_backup_on_postgres_points_to_pg_dump(runner, tmp_path):
    result = runner.invoke(args=["db", "backup", str(tmp_path / "x.db")])
    assert result.exit_code == 1 and "pg_dump" in result.output


def make_event(tenant, webhook, *, age_days, status):
    created = utcnow() - timedelta(days=age_days)
    event = events.record(tenant_id=tenant.id, type="call.ended", data={}, occurred_at=created)
    delivery = Delivery.create(
        id=new_id("dlv"),
        tenant=tenant,
        webhook=webhook,
        event=event,
        status=status,
        created_at=created,
    )
    DeliveryAttempt.create(delivery=delivery, number=1, attempted_at=created, status_code=200)
    return event


def test_prune_deletes_old_finished_events_in_batches(runner, tenant):
    webhook = Webhook.create(
        id=new_id("wh"),
        tenant=tenant,
        url="https://x.example",
        events=["call.ended"],
        secret="s" * 16,
    )
    old = [make_event(tenant, webhook, age_days=40, status="succeeded") for _ in range(7)]
    old_pending = make_event(tenant, webhook, age_days=40, status="pending")
    recent = make_event(tenant, webhook, age_days=2, status="succeeded")
    result = runner.invoke(args=["maintenance", "prune", "--batch-size", "3"])
    assert result.exit_code == 0, result.output
    assert "8 delivery attempts, 7 deliveries and 7 events" in result.output
    remaining = {event.id for event in Event.select()}
    assert remaining == {old_pending.id, recent.id}
    assert not remaining & {event.id for event in old}
    assert Delivery.select().count() == 2
    assert DeliveryAttempt.select().count() == 1


def test_prune_respects_days_option(runner, tenant):
    webhook = Webhook.create(
        id=new_id("wh"),
        tenant=tenant,
        url="https://x.example",
        events=["call.ended"],
        secret="s" * 16,
    )
    make_event(tenant, webhook, age_days=10, status="failed")
    assert runner.invoke(args=["maintenance", "prune"]).exit_code == 0
    assert Event.select().count() == 1
    assert runner.invoke(args=["maintenance", "prune", "--days", "5"]).exit_code == 0
    assert Event.select().count() == 0


def test_prune_rejects_zero_days():
    with pytest.raises(Exception, match="at least 1 day"):
        maintenance.prune(older_than_days=0)


def test_prune_deletes_idempotency_keys_older_than_24_hours(runner, tenant, other_tenant):
    now = utcnow()
    ages = {"old": timedelta(hours=24, minutes=1), "older": timedelta(days=3),
            "stale": timedelta(days=2), "recent": timedelta(hours=23, minutes=59)}  # fmt: skip
    for key, age in ages.items():
        for owner in (tenant, other_tenant):
            IdempotencyKey.create(
                id=new_id("idem"),
                tenant=owner,
                key=key,
                fingerprint="f" * 64,
                # "stale": still running, its process long dead
                state="running" if key == "stale" else "done",
                status_code=None if key == "stale" else 201,
                body=None if key == "stale" else "{}",
                created_at=now - age,
            )
    result = runner.invoke(args=["maintenance", "prune", "--batch-size", "2"])
    assert result.exit_code == 0, result.output
    assert "Deleted 6 idempotency keys older than 24 hours." in result.output
    assert sorted(key.key for key in IdempotencyKey.select()) == ["recent", "recent"]
    # The days option is for events and delivery logs: keys always go after 24 hours.
    assert idempotency.KEEP_FOR == timedelta(hours=24)
    assert maintenance.prune(older_than_days=30)["keys"] == 0


def test_after_a_prune_the_log_starts_at_the_oldest_kept_and_numbers_on(
    runner, client, headers, tenant
):
    """The pruned events leave the log (a cursor on one is 404, saying why); the kept ones
    keep their place and new events take the numbers after the last one ever given."""
    webhook = Webhook.create(
        id=new_id("wh"),
        tenant=tenant,
        url="https://x.example",
        events=["call.ended"],
        secret="s" * 16,
    )
    pruned = [make_event(tenant, webhook, age_days=40, status="succeeded") for _ in range(3)]
    kept = [make_event(tenant, webhook, age_days=age, status="succeeded") for age in (3, 2)]
    assert runner.invoke(args=["maintenance", "prune"]).exit_code == 0
    listed = client.get("/api/v1/events", headers=headers).json
    assert [event["id"] for event in listed["events"]] == [event.id for event in kept]
    response = client.get("/api/v1/events", query_string={"after": pruned[-1].id}, headers=headers)
    assert response.status_code == 404 and "retention" in response.json["error"]["message"]
    newer = events.record(tenant_id=tenant.id, type="call.ended", data={})
    assert newer.seq == 6
    after_kept = client.get("/api/v1/events", query_string={"after": kept[-1].id}, headers=headers)
    assert [event["id"] for event in after_kept.json["events"]] == [newer.id]


def make_versions(client, headers, agent_id):
    """Versions 1 to 4 of the agent: created, a function added, the function changed, and
    renamed; then a call answered with version 2."""
    functions = f"/api/v1/agents/{agent_id}/functions"
    body = {
        "name": "lookup",
        "description": "Looks it up.",
        "endpoint": "https://crm.example.com/a",
        "parameters": {"type": "object", "properties": {}},
    }
    assert client.post(functions, json=body, headers=headers).status_code == 201
    changed = {"endpoint": "https://crm.example.com/b"}
    assert client.patch(f"{functions}/lookup", json=changed, headers=headers).status_code == 200
    renamed = {"name": "Renamed"}
    assert client.patch(f"/api/v1/agents/{agent_id}", json=renamed, headers=headers).status_code
    agent = Agent.get_by_id(agent_id)
    Call.create(
        id=new_id("call"),
        tenant=agent.tenant_id,
        agent=agent,
        agent_version=2,
        caller_number="+6281111111",
        callee_number="+6282222222",
    )
    return agent


def test_prune_deletes_the_versions_no_call_names_of_agents_deleted_long_ago(
    runner, client, headers, agent_id
):
    agent = make_versions(client, headers, agent_id)
    kept_version = client.get(f"/api/v1/agents/{agent_id}/versions/2", headers=headers).json
    other = client.post(
        "/api/v1/agents", json={"name": "Other", "systemPrompt": "Hi."}, headers=headers
    ).json["id"]
    make_versions(client, headers, other)
    for deleted, age_days in ((agent_id, 40), (other, 10)):
        assert client.delete(f"/api/v1/agents/{deleted}", headers=headers).status_code == 204
        Agent.update(deleted_at=utcnow() - timedelta(days=age_days)).where(
            Agent.id == deleted
        ).execute()

    result = runner.invoke(args=["maintenance", "prune", "--batch-size", "2"])
    assert result.exit_code == 0, result.output
    assert (
        "Deleted 3 versions and 1 function definitions of agents deleted more than 30 days ago"
        in result.output
    )
    # The version its call names stays, whole, with the one definition it refers to.
    [kept] = AgentVersion.select().where(AgentVersion.agent == agent)
    assert kept.version == 2
    assert [{"name": entry["name"], "endpoint": entry["endpoint"]} for entry in kept.functions] == [
        {"name": f["name"], "endpoint": f["endpoint"]} for f in kept_version["functions"]
    ]
    assert FunctionDefinition.select().where(FunctionDefinition.agent == agent).count() == 1
    # An agent deleted within the retention keeps every version.
    assert AgentVersion.select().where(AgentVersion.agent == other).count() == 4
    assert FunctionDefinition.select().where(FunctionDefinition.agent == other).count() == 2
    assert maintenance.prune(older_than_days=30)["versions"] == 0
