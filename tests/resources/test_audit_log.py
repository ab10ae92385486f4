"""GET /api/v1/audit-log: every change to the tenant, newest first, keyset paged, filtered by
action, actor type and time; API changes labelled by their key (DESIGN section 14)."""

import re
from datetime import timedelta

import pytest

from app.db import database
from app.models import AuditEntry
from app.services import audit
from app.services import keys as key_service
from app.util import isoformat, utcnow
from tests.helpers import ACTOR, assert_error, captured_queries

LOG = "/api/v1/audit-log"
AGENT = {"name": "Reception", "systemPrompt": "Be helpful."}


def entries(client, headers, **query):
    response = client.get(LOG, query_string=query, headers=headers)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def test_an_api_change_is_an_entry_labelled_by_its_key(client, headers, api_key, tenant):
    agent_id = client.post("/api/v1/agents", json=AGENT, headers=headers).get_json()["id"]
    client.patch(f"/api/v1/agents/{agent_id}", json={"name": "Front desk"}, headers=headers)
    body = entries(client, headers, actorType="api_key")
    key = key_service.authenticate(key=api_key)
    assert key is not None
    updated, created = body["entries"]
    assert updated == {
        "id": updated["id"],
        "createdAt": updated["createdAt"],
        "actor": {"type": "api_key", "id": key.key_id, "label": f"test ({api_key[:12]}…)"},
        "action": "agent.updated",
        "targetId": agent_id,
        "details": {"fields": ["name"]},
        "ip": "127.0.0.1",
    }
    assert re.fullmatch(r"aud_[a-z0-9]{20}", updated["id"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", updated["createdAt"])
    assert (created["action"], created["targetId"], created["details"]) == (
        "agent.created",
        agent_id,
        {},
    )
    assert (body["hasMore"], body["nextAfter"]) == (False, created["id"])
    assert api_key not in str(body)


def test_pages_follow_each_other_newest_first_without_a_gap(client, headers, tenant):
    for number in range(5):
        client.post("/api/v1/agents", json={**AGENT, "name": f"A{number}"}, headers=headers)
    every = entries(client, headers, limit=100)["entries"]
    seen, after = [], None
    while True:
        page = entries(client, headers, limit=2, **({"after": after} if after else {}))
        seen += page["entries"]
        after = page["nextAfter"]
        if not page["hasMore"]:
            break
    assert [entry["id"] for entry in seen] == [entry["id"] for entry in every]
    assert len(every) == 7  # the tenant's creation, its key and the five agents
    stamps = [(entry["createdAt"], entry["id"]) for entry in every]
    assert stamps == sorted(stamps, reverse=True)
    last = entries(client, headers, after=after)
    assert last == {"entries": [], "hasMore": False, "nextAfter": after}


def test_entries_of_one_moment_page_by_id(client, headers, tenant):
    AuditEntry.delete().execute()
    with database.atomic():
        written = [
            audit.write(ACTOR, tenant_id=tenant.id, action="agent.created").id for _ in range(4)
        ]
    AuditEntry.update(created_at=utcnow()).execute()  # one moment for all
    first = entries(client, headers, limit=2)
    second = entries(client, headers, limit=2, after=first["nextAfter"])
    ids = [entry["id"] for entry in first["entries"] + second["entries"]]
    assert ids == sorted(written, reverse=True)
    assert first["hasMore"] is True and second["hasMore"] is False


def test_filters_by_action_actor_type_and_since(client, headers, tenant, runner):
    agent_id = client.post("/api/v1/agents", json=AGENT, headers=headers).get_json()["id"]
    runner.invoke(args=["credits", "grant", "--tenant", "acme", "--minutes", "5"])
    old = AuditEntry.get(AuditEntry.action == "tenant.created")
    AuditEntry.update(created_at=utcnow() - timedelta(days=3)).where(
        AuditEntry.id == old.id
    ).execute()

    def actions(**query):
        return [entry["action"] for entry in entries(client, headers, **query)["entries"]]

    assert actions(action="agent.created") == ["agent.created"]
    assert actions(actorType="cli") == ["credits.granted"]
    assert "tenant.created" in actions() and "tenant.created" not in actions(
        since=isoformat(utcnow() - timedelta(days=1))
    )
    assert actions(since=(utcnow() - timedelta(days=4)).date().isoformat())[-1] == "tenant.created"
    assert actions(action="agent.deleted") == []
    assert agent_id


def test_a_read_key_reads_the_log(client, tenant):
    _, read = key_service.create_key(actor=ACTOR, tenant=tenant, name="reports", scope="read")
    body = entries(client, {"x-api-key": read})
    assert [entry["action"] for entry in body["entries"]][-1] == "tenant.created"


def test_another_tenants_entries_stay_theirs(client, headers, other_headers):
    client.post("/api/v1/agents", json=AGENT, headers=other_headers)
    theirs = entries(client, other_headers)["entries"]
    mine = entries(client, headers)["entries"]
    assert not {entry["id"] for entry in theirs} & {entry["id"] for entry in mine}
    response = client.get(LOG, query_string={"after": theirs[0]["id"]}, headers=headers)
    error = assert_error(response, 404, "not_found")
    assert error["details"] == {"after": theirs[0]["id"]}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "101"}, "limit"),
        ({"after": "evt_1"}, "after"),
        ({"actorType": "robot"}, "actorType"),
        ({"action": "DROP TABLE"}, "action"),
        ({"since": "yesterday"}, "since"),
    ],
)
def test_a_bad_parameter_is_422_naming_it(client, headers, query, field):
    error = assert_error(
        client.get(LOG, query_string=query, headers=headers), 422, "validation_error"
    )
    assert field in str(error["details"])


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("filters", "index"),
    [
        ({}, "auditentry_tenant_id_created_at_id"),
        ({"action": "agent.created"}, "audit_entry_tenant_id_action_created_at_id"),
    ],
)
def test_a_page_reads_an_index(app, tenant, filters, index):
    with captured_queries() as statements:
        audit.list_log(tenant=tenant, limit=10, **filters)
    [statement] = statements
    plan = database.execute_sql("EXPLAIN QUERY PLAN " + statement.sql, statement.params)
    details = " ".join(str(row[-1]) for row in plan)
    assert f"USING INDEX {index}" in details and "TEMP B-TREE" not in details, details
