"""A call's variables fill the {{name}} placeholders of its agent's prompt and greeting."""

import pytest

from app.models import Call
from app.services import agents as agent_service
from app.services.calls import admission as call_admission
from tests.call_flow import start
from tests.helpers import ACTOR, assert_error

PROMPT = "You call {{customer_name}} about order {{order_id}}. Speak {{tone}}."
GREETING = "Halo {{customer_name}}, ini {{agent_name}} dari Toko Maju."


@pytest.fixture
def templated(tenant, agent_id, did):
    agent_service.update_agent(
        actor=ACTOR, tenant=tenant, agent_id=agent_id, system_prompt=PROMPT, greeting_text=GREETING
    )
    return did


def test_variables_fill_the_prompt_and_the_greeting(client, runtime_headers, templated):
    variables = {
        "customer_name": "Budi",
        "order_id": "A-17",
        "tone": "warmly",
        "agent_name": "Sari",
    }
    response = start(client, runtime_headers, templated, variables=variables)
    assert response.status_code == 201, response.get_data(as_text=True)
    session = response.json["session"]
    assert session["systemPrompt"] == "You call Budi about order A-17. Speak warmly."
    assert session["greetingText"] == "Halo Budi, ini Sari dari Toko Maju."
    assert session["missingVariables"] == []
    assert Call.get_by_id(response.json["id"]).variables == variables


def test_a_placeholder_without_a_value_stays_and_is_listed_once(client, runtime_headers, templated):
    session = start(client, runtime_headers, templated, variables={"order_id": "A-17"}).json[
        "session"
    ]
    assert session["systemPrompt"] == (
        "You call {{customer_name}} about order A-17. Speak {{tone}}."
    )
    assert session["greetingText"] == "Halo {{customer_name}}, ini {{agent_name}} dari Toko Maju."
    assert session["missingVariables"] == ["customer_name", "tone", "agent_name"]


def test_without_variables_every_placeholder_is_missing(client, runtime_headers, templated):
    response = start(client, runtime_headers, templated)
    session = response.json["session"]
    assert session["systemPrompt"] == PROMPT and session["greetingText"] == GREETING
    assert session["missingVariables"] == ["customer_name", "order_id", "tone", "agent_name"]
    assert response.json["variables"] == {}


def test_a_value_is_put_in_as_it_is(client, runtime_headers, templated):
    variables = {"customer_name": "{{order_id}}", "order_id": "$1 \\1 {{x}}", "tone": ""}
    session = start(client, runtime_headers, templated, variables=variables).json["session"]
    assert session["systemPrompt"] == "You call {{order_id}} about order $1 \\1 {{x}}. Speak ."
    assert session["missingVariables"] == ["agent_name"]


def test_only_exact_placeholders_are_filled(client, runtime_headers, tenant, agent_id, did):
    prompt = "{{ name }} {name} {{name} {{{name}}} {{1name}} {{name}}"
    agent_service.update_agent(actor=ACTOR, tenant=tenant, agent_id=agent_id, system_prompt=prompt)
    session = start(client, runtime_headers, did, variables={"name": "N"}).json["session"]
    assert session["systemPrompt"] == "{{ name }} {name} {{name} {N} {{1name}} N"
    assert session["missingVariables"] == []


def test_a_repeated_provider_call_id_keeps_the_first_variables(client, runtime_headers, templated):
    first = start(
        client, runtime_headers, templated, providerCallId="p-1", variables={"tone": "calmly"}
    )
    again = start(
        client, runtime_headers, templated, providerCallId="p-1", variables={"tone": "loudly"}
    )
    assert again.status_code == 200
    assert again.json["session"] == first.json["session"]
    assert "Speak calmly." in again.json["session"]["systemPrompt"]


def test_the_service_fills_placeholders_in_one_pass():
    missing: list[str] = []
    filled = call_admission.fill_placeholders("{{a}}{{b}}{{a}}", {"a": "{{b}}"}, missing)
    assert (filled, missing) == ("{{b}}{{b}}{{b}}", ["b"])


def test_the_placeholders_are_listed_once_with_where_they_are():
    found = call_admission.placeholders(PROMPT + " {{tone}} {{ spaced }}", GREETING)
    assert found == {
        "customer_name": ["prompt", "greeting"],
        "order_id": ["prompt"],
        "tone": ["prompt"],
        "agent_name": ["greeting"],
    }
    assert call_admission.placeholders("No names.", "") == {}


@pytest.mark.parametrize(
    "variables",
    [
        {"1st": "x"},
        {"has-dash": "x"},
        {"": "x"},
        {"a" * 65: "x"},
        {"n": 5},
        {"n": None},
        {"n": ["x"]},
        {"n": "x" * 2001},
        {f"v{i}": "x" for i in range(51)},
        ["a"],
        "a=b",
    ],
)
def test_bad_variables_are_422_naming_them(client, runtime_headers, did, variables):
    response = start(client, runtime_headers, did, variables=variables)
    assert set(assert_error(response, 422, "validation_error")["details"]) == {"variables"}
    assert Call.select().count() == 0


def test_fifty_variables_of_2000_characters_are_taken(client, runtime_headers, did):
    variables = {f"v{i}": "x" * 2000 for i in range(50)}
    response = start(client, runtime_headers, did, variables=variables)
    assert response.status_code == 201
    assert Call.get_by_id(response.json["id"]).variables == variables
