"""Agent versions: made at every call-facing change, listed, read and restored (DESIGN.md
section 11)."""

from app.models import AgentVersion, Function, FunctionDefinition
from tests.helpers import assert_error

PARAMETERS = {
    "type": "object",
    "properties": {"orderId": {"type": "string", "description": "The order number."}},
    "required": ["orderId"],
}


def function_body(**fields):
    return {
        "name": "lookup_order",
        "description": "Look up an order by its number.",
        "endpoint": "https://crm.example.com/orders",
        "parameters": PARAMETERS,
        **fields,
    }


def versions(client, headers, agent_id, **query):
    response = client.get(
        f"/api/v1/agents/{agent_id}/versions", headers=headers, query_string=query
    )
    assert response.status_code == 200, response.json
    return response.json


def version(client, headers, agent_id, number):
    response = client.get(f"/api/v1/agents/{agent_id}/versions/{number}", headers=headers)
    assert response.status_code == 200, response.json
    return response.json


def patch(client, headers, agent_id, **fields):
    response = client.patch(f"/api/v1/agents/{agent_id}", json=fields, headers=headers)
    assert response.status_code == 200, response.json
    return response.json


def add_function(client, headers, agent_id, **fields):
    response = client.post(
        f"/api/v1/agents/{agent_id}/functions", json=function_body(**fields), headers=headers
    )
    assert response.status_code == 201, response.json
    return response.json


def restore(client, headers, agent_id, number):
    return client.post(f"/api/v1/agents/{agent_id}/versions/{number}/restore", headers=headers)


def test_new_agent_is_at_version_1(client, headers, agent_id):
    agent = client.get(f"/api/v1/agents/{agent_id}", headers=headers).json
    assert agent["version"] == 1
    listed = versions(client, headers, agent_id)
    [first] = listed["versions"]
    assert set(first) == {"version", "createdAt", "changes", "actor"}
    assert (first["version"], first["changes"]) == (1, [])
    assert set(first["actor"]) == {"type", "id", "label"}
    assert listed["pagination"] == {"total": 1, "limit": 50, "offset": 0, "hasMore": False}


def test_version_holds_the_agent_fields_and_functions_without_secrets(client, headers, agent_id):
    created = add_function(client, headers, agent_id, secret="s" * 20)
    whole = version(client, headers, agent_id, 2)
    assert set(whole) == {"version", "createdAt", "agent", "functions"}
    assert whole["agent"] == {
        "name": "Reception",
        "systemPrompt": "Be helpful.",
        "voiceId": "Puck",
        "greetingText": "",
        "language": "id",
        "maxCallDurationMinutes": 10,
        "toolsEnabled": [],
        "escalationNumber": None,
        "analysisPlan": {"summary": True, "fields": []},
    }
    assert whole["functions"] == [
        {
            "name": "lookup_order",
            "description": created["description"],
            "endpoint": created["endpoint"],
            "method": "POST",
            "parameters": PARAMETERS,
            "timeoutMs": 5000,
        }
    ]
    text = client.get(f"/api/v1/agents/{agent_id}/versions/2", headers=headers).text
    assert "s" * 20 not in text and "fn_" not in text


def test_each_call_facing_change_makes_a_version_naming_it(client, headers, agent_id):
    patch(client, headers, agent_id, systemPrompt="Be brief.", voiceId="Kore")
    patch(client, headers, agent_id, name="Front desk")
    patch(client, headers, agent_id, escalationNumber="+6281234567", toolsEnabled=["transfer"])
    agent = patch(
        client, headers, agent_id, maxCallDurationMinutes=5, greetingText="Hi", language="en"
    )
    assert agent["version"] == 5
    changes = [item["changes"] for item in versions(client, headers, agent_id)["versions"]]
    assert changes == [
        ["greetingText", "language", "maxCallDurationMinutes"],
        ["toolsEnabled", "escalationNumber"],
        ["name"],
        ["systemPrompt", "voiceId"],
        [],
    ]
    assert version(client, headers, agent_id, 2)["agent"]["systemPrompt"] == "Be brief."
    assert version(client, headers, agent_id, 1)["agent"]["systemPrompt"] == "Be helpful."


def test_a_patch_that_changes_nothing_or_only_is_active_makes_no_version(client, headers, agent_id):
    patch(client, headers, agent_id, systemPrompt="Be helpful.", name="Reception")
    agent = patch(client, headers, agent_id, isActive=False)
    assert agent["version"] == 1
    assert versions(client, headers, agent_id)["pagination"]["total"] == 1


def test_function_changes_make_versions(client, headers, agent_id):
    add_function(client, headers, agent_id)
    path = f"/api/v1/agents/{agent_id}/functions/lookup_order"
    assert client.patch(path, json={"timeoutMs": 800}, headers=headers).status_code == 200
    # The same values again: no version.
    assert client.patch(path, json={"timeoutMs": 800}, headers=headers).status_code == 200
    assert client.delete(path, headers=headers).status_code == 204
    listed = versions(client, headers, agent_id)["versions"]
    assert [(item["version"], item["changes"]) for item in listed] == [
        (4, ["functions"]),
        (3, ["functions"]),
        (2, ["functions"]),
        (1, []),
    ]
    assert version(client, headers, agent_id, 3)["functions"][0]["timeoutMs"] == 800
    assert version(client, headers, agent_id, 4)["functions"] == []
    assert client.get(f"/api/v1/agents/{agent_id}", headers=headers).json["version"] == 4


def test_a_version_refers_to_unchanged_definitions_rather_than_copying_them(
    client, headers, agent_id
):
    """Eight definitions near 64 KiB each: a name change writes a version of a few hundred
    bytes (each definition is stored once), and every version still reads whole."""
    enum = [f"{n:03d}".ljust(256, "x") for n in range(100)]
    properties = {f"p{n}": {"type": "string", "description": "x", "enum": enum} for n in range(2)}
    big = {"type": "object", "properties": properties, "required": []}
    for n in range(8):
        body = function_body(name=f"f{n}", parameters=big)
        assert (
            client.post(
                f"/api/v1/agents/{agent_id}/functions", json=body, headers=headers
            ).status_code
            == 201
        )
    before = version(client, headers, agent_id, 9)
    patch(client, headers, agent_id, name="Renamed")
    stored = AgentVersion.get(agent=agent_id, version=10)
    size = sum(len(str(value)) for value in stored.__data__.values() if value is not None)
    assert size < 2_000
    assert FunctionDefinition.select().where(FunctionDefinition.agent == agent_id).count() == 8
    after = version(client, headers, agent_id, 10)
    assert after["functions"] == before["functions"]
    assert [entry["parameters"] for entry in after["functions"]] == [big] * 8


def test_rotating_a_secret_makes_no_version(client, headers, agent_id):
    add_function(client, headers, agent_id)
    path = f"/api/v1/agents/{agent_id}/functions/lookup_order/rotate-secret"
    assert client.post(path, json={}, headers=headers).status_code == 200
    assert versions(client, headers, agent_id)["pagination"]["total"] == 2


def test_a_deleted_function_name_can_be_taken_again(client, headers, agent_id):
    add_function(client, headers, agent_id)
    path = f"/api/v1/agents/{agent_id}/functions/lookup_order"
    assert client.delete(path, headers=headers).status_code == 204
    assert client.get(path + "/test", headers=headers).status_code in (404, 405)
    add_function(client, headers, agent_id, endpoint="https://crm.example.com/v2/orders")
    listed = client.get(f"/api/v1/agents/{agent_id}/functions", headers=headers).json
    assert [item["endpoint"] for item in listed["functions"]] == [
        "https://crm.example.com/v2/orders"
    ]
    assert Function.select().where(Function.agent == agent_id).count() == 2


def test_version_list_is_paged_newest_first(client, headers, agent_id):
    for number in range(2, 6):
        patch(client, headers, agent_id, systemPrompt=f"Prompt {number}")
    page = versions(client, headers, agent_id, limit=2, offset=1)
    assert [item["version"] for item in page["versions"]] == [4, 3]
    assert page["pagination"] == {"total": 5, "limit": 2, "offset": 1, "hasMore": True}
    last = versions(client, headers, agent_id, limit=2, offset=4)
    assert [item["version"] for item in last["versions"]] == [1]
    assert last["pagination"]["hasMore"] is False


def test_version_list_rejects_a_bad_limit(client, headers, agent_id):
    response = client.get(f"/api/v1/agents/{agent_id}/versions?limit=0", headers=headers)
    assert "limit" in assert_error(response, 422, "validation_error")["details"]


def test_unknown_version_is_404(client, headers, agent_id):
    error = assert_error(
        client.get(f"/api/v1/agents/{agent_id}/versions/2", headers=headers), 404, "not_found"
    )
    assert "version 2" in error["message"]
    assert_error(restore(client, headers, agent_id, 7), 404, "not_found")
    assert_error(
        client.get(f"/api/v1/agents/{agent_id}/versions/99999999999", headers=headers),
        404,
        "not_found",
    )


def test_a_deleted_agent_has_no_versions(client, headers, agent_id):
    assert client.delete(f"/api/v1/agents/{agent_id}", headers=headers).status_code == 204
    for path in ("versions", "versions/1", "stats"):
        response = client.get(f"/api/v1/agents/{agent_id}/{path}", headers=headers)
        assert_error(response, 404, "not_found")


def test_restore_brings_back_fields_and_functions(client, headers, agent_id):
    first = add_function(client, headers, agent_id, secret="first-secret-0123")  # version 2
    patch(client, headers, agent_id, systemPrompt="Be brief.", voiceId="Kore")  # 3
    path = f"/api/v1/agents/{agent_id}/functions"
    client.patch(
        f"{path}/lookup_order", json={"endpoint": "https://new.example.com/o"}, headers=headers
    )  # 4
    add_function(client, headers, agent_id, name="book_visit")  # 5
    response = restore(client, headers, agent_id, 2)
    assert response.status_code == 200, response.json
    agent = response.json
    assert (agent["version"], agent["systemPrompt"], agent["voiceId"]) == (6, "Be helpful.", "Puck")
    latest = versions(client, headers, agent_id)["versions"][0]
    assert (latest["version"], latest["changes"]) == (6, ["systemPrompt", "voiceId", "functions"])
    listed = client.get(path, headers=headers).json["functions"]
    assert [(item["name"], item["endpoint"]) for item in listed] == [
        ("lookup_order", first["endpoint"])
    ]
    assert (
        version(client, headers, agent_id, 6)["functions"]
        == version(client, headers, agent_id, 2)["functions"]
    )
    assert (
        version(client, headers, agent_id, 6)["agent"]
        == version(client, headers, agent_id, 2)["agent"]
    )
    # The function kept its signing secret through the restore.
    kept = Function.get((Function.agent == agent_id) & Function.deleted_at.is_null())
    assert kept.signing_secret == "first-secret-0123"


def test_restore_brings_back_a_deleted_function_with_its_secret(client, headers, agent_id):
    add_function(client, headers, agent_id, secret="kept-secret-01234")  # version 2
    path = f"/api/v1/agents/{agent_id}/functions/lookup_order"
    assert client.delete(path, headers=headers).status_code == 204  # 3
    assert client.get(f"/api/v1/agents/{agent_id}/functions", headers=headers).json == {
        "functions": []
    }
    assert restore(client, headers, agent_id, 2).json["version"] == 4
    [back] = client.get(f"/api/v1/agents/{agent_id}/functions", headers=headers).json["functions"]
    assert back["name"] == "lookup_order"
    live = Function.get((Function.agent == agent_id) & Function.deleted_at.is_null())
    assert live.signing_secret == "kept-secret-01234"
    assert Function.select().where(Function.agent == agent_id).count() == 1


def test_restoring_what_the_agent_holds_changes_nothing(client, headers, agent_id):
    patch(client, headers, agent_id, systemPrompt="Be brief.")
    patch(client, headers, agent_id, systemPrompt="Be helpful.")  # 3, equal to 1
    response = restore(client, headers, agent_id, 1)
    assert response.status_code == 200
    assert response.json["version"] == 3
    assert AgentVersion.select().where(AgentVersion.agent == agent_id).count() == 3


def test_restore_writes_an_audit_entry(client, headers, agent_id):
    from app.models import AuditEntry

    patch(client, headers, agent_id, systemPrompt="Be brief.")
    restore(client, headers, agent_id, 1)
    entry = AuditEntry.get(AuditEntry.action == "agent.restored")
    assert entry.target_id == agent_id
    assert entry.details == {"version": 3, "restoredVersion": 1, "changes": ["systemPrompt"]}


def test_other_tenants_versions_are_404(client, agent_id, other_headers):
    for path in ("versions", "versions/1", "stats"):
        response = client.get(f"/api/v1/agents/{agent_id}/{path}", headers=other_headers)
        assert_error(response, 404, "not_found")
    assert_error(restore(client, other_headers, agent_id, 1), 404, "not_found")
