"""An agent's analysisPlan: validated, defaulted, and versioned like its prompt (DESIGN.md
section 17)."""

import pytest

from app.errors import ValidationFailed
from app.services import analysis
from tests.helpers import assert_error

PLAN = {
    "summary": True,
    "fields": [
        {"name": "customerName", "type": "string", "description": "The caller's name."},
        {"name": "budget", "type": "number", "required": True},
        {"name": "wantsCallback", "type": "boolean"},
        {"name": "interest", "type": "enum", "choices": ["low", "medium", "high"]},
    ],
    "successCriteria": "The caller books a viewing.",
}


def patch(client, headers, agent_id, **fields):
    return client.patch(f"/api/v1/agents/{agent_id}", json=fields, headers=headers)


def test_new_agent_has_the_default_plan(client, headers, agent_id):
    agent = client.get(f"/api/v1/agents/{agent_id}", headers=headers).json
    assert agent["analysisPlan"] == {"summary": True, "fields": []}
    assert analysis.DEFAULT_PLAN == {"summary": True, "fields": []}


def test_plan_is_kept_with_defaults_filled_in(client, headers, agent_id):
    response = patch(client, headers, agent_id, analysisPlan=PLAN)
    assert response.status_code == 200, response.json
    assert response.json["analysisPlan"] == {
        "summary": True,
        "fields": [
            {
                "name": "customerName",
                "type": "string",
                "description": "The caller's name.",
                "required": False,
            },
            {"name": "budget", "type": "number", "description": "", "required": True},
            {"name": "wantsCallback", "type": "boolean", "description": "", "required": False},
            {
                "name": "interest",
                "type": "enum",
                "description": "",
                "choices": ["low", "medium", "high"],
                "required": False,
            },
        ],
        "successCriteria": "The caller books a viewing.",
    }


def test_plan_change_makes_a_new_version_that_keeps_it(client, headers, agent_id):
    assert patch(client, headers, agent_id, analysisPlan=PLAN).json["version"] == 2
    listed = client.get(f"/api/v1/agents/{agent_id}/versions", headers=headers).json
    assert listed["versions"][0]["changes"] == ["analysisPlan"]
    second = client.get(f"/api/v1/agents/{agent_id}/versions/2", headers=headers).json
    assert [field["name"] for field in second["agent"]["analysisPlan"]["fields"]] == [
        "customerName",
        "budget",
        "wantsCallback",
        "interest",
    ]
    first = client.get(f"/api/v1/agents/{agent_id}/versions/1", headers=headers).json
    assert first["agent"]["analysisPlan"] == {"summary": True, "fields": []}
    # The same plan again changes nothing.
    assert patch(client, headers, agent_id, analysisPlan=PLAN).json["version"] == 2


def test_restore_brings_back_a_versions_plan(client, headers, agent_id):
    patch(client, headers, agent_id, analysisPlan=PLAN)
    response = client.post(f"/api/v1/agents/{agent_id}/versions/1/restore", headers=headers)
    assert response.status_code == 200
    assert response.json["version"] == 3
    assert response.json["analysisPlan"] == {"summary": True, "fields": []}


def test_create_takes_a_plan(client, headers):
    response = client.post(
        "/api/v1/agents",
        json={"name": "Sales", "systemPrompt": "Sell.", "analysisPlan": {"summary": False}},
        headers=headers,
    )
    assert response.status_code == 201, response.json
    assert response.json["analysisPlan"] == {"summary": False, "fields": []}


def test_enum_without_choices_is_refused_naming_the_field(client, headers, agent_id):
    plan = {"fields": [{"name": "ok", "type": "string"}, {"name": "mood", "type": "enum"}]}
    error = assert_error(
        patch(client, headers, agent_id, analysisPlan=plan), 422, "validation_error"
    )
    assert error["message"] == "Invalid value for analysisPlan."
    assert error["details"] == {
        "analysisPlan": {
            "fields": {
                "1": {
                    "choices": [
                        "An enum field needs choices: 1–50 distinct texts of 1–100 characters."
                    ]
                }
            }
        }
    }


@pytest.mark.parametrize(
    "plan, details",
    [
        ([], {"_schema": ["Must be an object: {summary, fields, successCriteria}."]}),
        ({"summary": "yes"}, {"summary": ["Must be true or false."]}),
        ({"extra": 1}, {"extra": ["Unknown field."]}),
        ({"fields": "name"}, {"fields": ["Must be a list of fields."]}),
        (
            {"fields": [{"name": f"f{i}", "type": "string"} for i in range(21)]},
            {"fields": ["At most 20 fields."]},
        ),
        (
            {"fields": [{"name": "1st", "type": "string"}]},
            {
                "fields": {
                    "0": {
                        "name": [
                            "Required: a name of letters, digits and _ (1–64, not starting "
                            "with a digit)."
                        ]
                    }
                }
            },
        ),
        (
            {"fields": [{"name": "a", "type": "date"}]},
            {"fields": {"0": {"type": ["Required: one of string, number, boolean, enum."]}}},
        ),
        (
            {"fields": [{"name": "a", "type": "string"}, {"name": "a", "type": "number"}]},
            {"fields": {"1": {"name": ["Another field is named a already."]}}},
        ),
        (
            {"fields": [{"name": "a", "type": "string", "choices": ["x"]}]},
            {"fields": {"0": {"choices": ["Only an enum field has choices."]}}},
        ),
        (
            {"fields": [{"name": "a", "type": "enum", "choices": ["x", "x"]}]},
            {
                "fields": {
                    "0": {
                        "choices": [
                            "An enum field needs choices: 1–50 distinct texts of 1–100 characters."
                        ]
                    }
                }
            },
        ),
        (
            {"fields": [{"name": "a", "type": "string", "required": "no"}]},
            {"fields": {"0": {"required": ["Must be true or false."]}}},
        ),
        (
            {"successCriteria": 5},
            {"successCriteria": ["Must be text of at most 2,000 characters."]},
        ),
    ],
)
def test_invalid_plans_are_refused(client, headers, agent_id, plan, details):
    error = assert_error(
        patch(client, headers, agent_id, analysisPlan=plan), 422, "validation_error"
    )
    assert error["details"] == {"analysisPlan": details}
    with pytest.raises(ValidationFailed) as raised:
        analysis.validate_plan(plan)
    assert raised.value.details == {"analysisPlan": details}


def test_twenty_fields_are_allowed():
    plan = {"fields": [{"name": f"f{i}", "type": "boolean"} for i in range(20)]}
    assert len(analysis.validate_plan(plan)["fields"]) == 20
