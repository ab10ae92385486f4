"""Agent functions: definitions API."""

import json
import threading

import pytest

from app.models import Function
from tests.call_flow import RUNTIME, answer, start
from tests.helpers import assert_error
from tests.receiver import Receiver

PARAMETERS = {
    "type": "object",
    "properties": {
        "orderId": {"type": "string", "description": "The order number."},
        "express": {"type": "boolean", "description": "Express shipping?"},
        "tags": {"type": "array", "description": "Labels.", "items": {"type": "string"}},
        "size": {"type": "string", "description": "Size.", "enum": ["S", "M", "L"]},
    },
    "required": ["orderId"],
}


def body(**fields):
    return {
        "name": "lookup_order",
        "description": "Look up an order by its number.",
        "endpoint": "https://crm.example.com/orders",
        "method": "GET",
        "parameters": PARAMETERS,
        **fields,
    }


def create(client, headers, agent_id, **fields):
    return client.post(f"/api/v1/agents/{agent_id}/functions", json=body(**fields), headers=headers)


def test_create_function_returns_signing_secret_once(client, headers, agent_id):
    response = create(client, headers, agent_id)
    assert response.status_code == 201
    created = response.json
    assert set(created) == {
        "name",
        "description",
        "endpoint",
        "method",
        "parameters",
        "timeoutMs",
        "createdAt",
        "previousSecretExpiresAt",
        "signingSecret",
    }
    assert created["timeoutMs"] == 5000
    assert created["signingSecret"].startswith("fsec_") and len(created["signingSecret"]) > 40
    assert created["parameters"] == PARAMETERS
    listed = client.get(f"/api/v1/agents/{agent_id}/functions", headers=headers)
    assert listed.status_code == 200
    [item] = listed.json["functions"]
    assert "signingSecret" not in item and created["signingSecret"] not in listed.text
    assert item == {k: v for k, v in created.items() if k != "signingSecret"}


def test_create_function_with_own_secret_and_default_method(client, headers, agent_id):
    fields = body(secret="s" * 20)
    del fields["method"]
    response = client.post(f"/api/v1/agents/{agent_id}/functions", json=fields, headers=headers)
    assert response.status_code == 201
    assert response.json["signingSecret"] == "s" * 20
    assert response.json["method"] == "POST"


def test_duplicate_function_name_is_conflict(client, headers, agent_id):
    create(client, headers, agent_id)
    error = assert_error(create(client, headers, agent_id), 409, "conflict")
    assert "lookup_order" in error["message"]


def test_two_creates_of_one_name_at_once_answer_201_and_409(app, headers, agent_id):
    """Two requests released together, each on its own thread and database connection: one
    creates the function, the other is told of the conflict (by the service's check or,
    when both passed it, by the unique index), never a 500. Several rounds, so that on
    PostgreSQL both requests often get past the check."""
    for round_number in range(8):
        name = f"lookup_{round_number}"
        barrier = threading.Barrier(2)
        responses = []

        def post(name=name, barrier=barrier, responses=responses):
            client = app.test_client()
            barrier.wait(timeout=10)
            responses.append(create(client, headers, agent_id, name=name))

        posters = [threading.Thread(target=post) for _ in range(2)]
        for poster in posters:
            poster.start()
        for poster in posters:
            poster.join(30)
        statuses = sorted(response.status_code for response in responses)
        assert statuses == [201, 409], [response.get_data(as_text=True) for response in responses]
        assert_error(next(r for r in responses if r.status_code == 409), 409, "conflict")
        assert Function.select().where(Function.name == name).count() == 1


def test_same_name_on_two_agents_is_fine(client, headers, agent_id):
    other = client.post(
        "/api/v1/agents", json={"name": "B", "systemPrompt": "x"}, headers=headers
    ).json["id"]
    assert create(client, headers, agent_id).status_code == 201
    assert create(client, headers, other).status_code == 201


@pytest.mark.parametrize(
    ("fields", "bad_field"),
    [
        ({"name": "1abc"}, "name"),
        ({"name": "has-dash"}, "name"),
        ({"method": "TRACE"}, "method"),
        ({"description": ""}, "description"),
        ({"secret": "short"}, "secret"),
        ({"parameters": {"type": "array"}}, "parameters"),
        (
            {
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "date", "description": "x"}},
                }
            },
            "parameters",
        ),
        ({"parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}, "parameters"),
        ({"parameters": {"type": "object", "properties": {}, "required": ["ghost"]}}, "parameters"),
        (
            {
                "parameters": {
                    "type": "object",
                    "properties": {
                        "a": {"type": "string", "description": "x", "items": {"type": "string"}}
                    },
                }
            },
            "parameters",
        ),
        ({"parameters": {"type": "object", "extra": 1}}, "parameters"),
        ({"unknown": 1}, "unknown"),
        ({"timeoutMs": 499}, "timeoutMs"),
        ({"timeoutMs": 5001}, "timeoutMs"),
        ({"timeoutMs": "1000"}, "timeoutMs"),
        ({"timeoutMs": 1000.5}, "timeoutMs"),
        ({"timeoutMs": None}, "timeoutMs"),
    ],
)
def test_create_function_rejects_invalid_definition(client, headers, agent_id, fields, bad_field):
    error = assert_error(create(client, headers, agent_id, **fields), 422, "validation_error")
    assert bad_field in error["details"]


@pytest.mark.parametrize("timeout_ms", [500, 1234, 5000])
def test_a_function_takes_a_timeout_between_500_and_5000_ms(client, headers, agent_id, timeout_ms):
    response = create(client, headers, agent_id, timeoutMs=timeout_ms)
    assert response.status_code == 201
    assert response.json["timeoutMs"] == timeout_ms
    [listed] = client.get(f"/api/v1/agents/{agent_id}/functions", headers=headers).json["functions"]
    assert listed["timeoutMs"] == timeout_ms


def test_an_out_of_range_timeout_names_the_range(client, headers, agent_id):
    error = assert_error(create(client, headers, agent_id, timeoutMs=100), 422, "validation_error")
    assert error["details"] == {
        "timeoutMs": ["Must be greater than or equal to 500 and less than or equal to 5000."]
    }


def enum_parameters(count, length, properties=1):
    """Parameters whose properties each have an enum of count values of length characters."""
    return {
        "type": "object",
        "properties": {
            f"p{n}": {
                "type": "string",
                "description": "One of them.",
                "enum": [f"{v:04d}".ljust(length, "x") for v in range(count)],
            }
            for n in range(properties)
        },
    }


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"description": "d" * 1025}, "Length must be between 1 and 1024."),
        ({"parameters": enum_parameters(101, 5)}, "Length must be between 1 and 100."),
        ({"parameters": enum_parameters(3, 257)}, "At most 256 characters."),
        (
            {
                "parameters": {
                    **enum_parameters(1, 5),
                    "properties": {
                        "p": {"type": "array", "description": "x", "enum": [["y" * 200, "z" * 60]]}
                    },
                }
            },
            "At most 256 characters.",
        ),
        ({"parameters": enum_parameters(100, 256, properties=3)}, "at most 65,536 (64 KiB)"),
    ],
)
def test_a_definition_is_bounded(client, headers, agent_id, fields, message):
    """An enum of 100 values of 256 characters fits; three of them pass 64 KiB as a whole."""
    error = assert_error(create(client, headers, agent_id, **fields), 422, "validation_error")
    [bad] = error["details"]
    assert bad == next(iter(fields))
    assert message in json.dumps(error["details"][bad])
    assert Function.select().count() == 0


def test_the_largest_definitions_fit_and_an_update_past_64_kib_is_refused(
    client, headers, agent_id
):
    largest = enum_parameters(100, 256, properties=2)
    assert (
        create(client, headers, agent_id, description="d" * 1024, parameters=largest).status_code
        == 201
    )
    error = assert_error(
        update(client, headers, agent_id, parameters=enum_parameters(100, 256, properties=3)),
        422,
        "validation_error",
    )
    assert list(error["details"]) == ["parameters"]
    assert Function.get().parameters["properties"].keys() == {"p0", "p1"}


def update(client, headers, agent_id, **fields):
    """PATCH the function lookup_order of the agent."""
    return client.patch(
        f"/api/v1/agents/{agent_id}/functions/lookup_order", json=fields, headers=headers
    )


def test_update_changes_only_the_given_fields(client, headers, agent_id):
    created = create(client, headers, agent_id, secret="s" * 20).json
    response = update(client, headers, agent_id, timeoutMs=800)
    assert response.status_code == 200
    changed = {key for key in response.json if response.json[key] != created.get(key)}
    assert changed == {"timeoutMs"}
    assert response.json["timeoutMs"] == 800
    assert "signingSecret" not in response.json
    stored = Function.get()
    assert (stored.timeout_ms, stored.signing_secret) == (800, "s" * 20)
    assert stored.updated_at > stored.created_at


def test_update_replaces_endpoint_method_description_and_parameters(client, headers, agent_id):
    create(client, headers, agent_id)
    fields = {
        "description": "Finds an order.",
        "endpoint": "https://erp.example.com/v2/orders",
        "method": "POST",
        "parameters": {"type": "object", "properties": {}},
    }
    response = update(client, headers, agent_id, **fields)
    assert response.status_code == 200
    assert {key: response.json[key] for key in fields} == {
        **fields,
        "parameters": {"type": "object", "properties": {}, "required": []},
    }
    [listed] = client.get(f"/api/v1/agents/{agent_id}/functions", headers=headers).json["functions"]
    assert listed == response.json


@pytest.mark.parametrize(
    ("fields", "bad_field"),
    [
        ({"timeoutMs": 499}, "timeoutMs"),
        ({"timeoutMs": 5001}, "timeoutMs"),
        ({"method": "TRACE"}, "method"),
        ({"description": ""}, "description"),
        ({"parameters": {"type": "array"}}, "parameters"),
        ({"name": "renamed"}, "name"),
        ({"secret": "s" * 20}, "secret"),
        ({"endpoint": "https://10.0.0.1/orders"}, "endpoint"),
    ],
)
def test_update_rejects_invalid_fields_and_changes_nothing(
    app, client, headers, agent_id, fields, bad_field
):
    create(client, headers, agent_id)
    before = client.get(f"/api/v1/agents/{agent_id}/functions", headers=headers).json
    app.config["ALLOW_PRIVATE_URLS"] = False
    error = assert_error(update(client, headers, agent_id, **fields), 422, "validation_error")
    assert list(error["details"]) == [bad_field]
    assert client.get(f"/api/v1/agents/{agent_id}/functions", headers=headers).json == before


def test_update_of_an_unknown_function_is_not_found(client, headers, agent_id):
    error = assert_error(update(client, headers, agent_id, timeoutMs=800), 404, "not_found")
    assert error["message"] == f"Function lookup_order not found on agent {agent_id}."
    assert_error(update(client, headers, "agent_nope", timeoutMs=800), 404, "not_found")


def test_functions_of_unknown_agent_are_not_found(client, headers):
    assert_error(
        client.get("/api/v1/agents/agent_nope/functions", headers=headers), 404, "not_found"
    )
    assert_error(create(client, headers, "agent_nope"), 404, "not_found")


def test_delete_function(client, headers, agent_id):
    create(client, headers, agent_id)
    response = client.delete(f"/api/v1/agents/{agent_id}/functions/lookup_order", headers=headers)
    assert response.status_code == 204 and response.data == b""
    assert client.get(f"/api/v1/agents/{agent_id}/functions", headers=headers).json == {
        "functions": []
    }
    assert_error(
        client.delete(f"/api/v1/agents/{agent_id}/functions/lookup_order", headers=headers),
        404,
        "not_found",
    )


def test_functions_of_deleted_agent_are_gone(client, headers, agent_id):
    create(client, headers, agent_id)
    client.delete(f"/api/v1/agents/{agent_id}", headers=headers)
    assert Function.select().count() == 0
    assert_error(
        client.get(f"/api/v1/agents/{agent_id}/functions", headers=headers), 404, "not_found"
    )


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://crm.example.com/orders",
        "https://127.0.0.1/orders",
        "https://10.0.0.1/orders",
        "https://169.254.169.254/latest",
        "https://[::1]/orders",
        "https://[::ffff:127.0.0.1]/orders",
        "https://user:pass@crm.example.com/orders",
        "ftp://crm.example.com/orders",
    ],
)
def test_endpoint_must_be_a_public_https_url(app, client, headers, agent_id, endpoint):
    app.config["ALLOW_PRIVATE_URLS"] = False
    error = assert_error(
        create(client, headers, agent_id, endpoint=endpoint), 422, "validation_error"
    )
    assert list(error["details"]) == ["endpoint"]


@pytest.mark.parametrize("allow_private", [True, False])
@pytest.mark.parametrize("endpoint", ["https://a..b/orders", "https://xn--/h"])
def test_endpoint_must_have_a_valid_host_name(
    app, client, headers, agent_id, allow_private, endpoint
):
    app.config["ALLOW_PRIVATE_URLS"] = allow_private
    response = create(client, headers, agent_id, endpoint=endpoint)
    error = assert_error(response, 422, "validation_error")
    assert list(error["details"]) == ["endpoint"]
    assert "not a valid host name" in error["details"]["endpoint"][0]
    assert Function.select().count() == 0


# A name resolving to loopback with the root's dot, a dotted address, percent-escapes: each
# host leads to 127.0.0.1 once the sender has normalised it.
LOOPBACK_SPELLINGS = [
    "localhost.",
    "127.0.0.1.",
    "%31%32%37.0.0.1",
    "127%2e0%2e0%2e1",
    "loc%61lhost",
]


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_endpoint_refuses_loopback_however_it_is_written(app, client, headers, agent_id, host):
    app.config["ALLOW_PRIVATE_URLS"] = False
    response = create(client, headers, agent_id, endpoint=f"https://{host}/orders")
    error = assert_error(response, 422, "validation_error")
    assert "a private or reserved address" in error["details"]["endpoint"][0]
    assert Function.select().count() == 0


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_loopback_however_written_is_called_when_private_urls_are_allowed(
    client, headers, runtime_headers, agent_id, did, host
):
    with Receiver() as receiver:
        endpoint = f"http://{host}:{receiver.port}/orders"
        created = create(client, headers, agent_id, endpoint=endpoint, method="POST")
        assert created.status_code == 201
        call_id = start(client, runtime_headers, did).json["id"]
        answer(client, runtime_headers, call_id)
        called = client.post(
            f"{RUNTIME}/{call_id}/function-calls",
            json={"functionName": "lookup_order", "parameters": {"orderId": "A-1"}},
            headers=runtime_headers,
        )
    assert called.status_code == 200, called.get_data(as_text=True)
    [request] = receiver.requests
    assert request.path == "/orders"
    assert request.json()["parameters"] == {"orderId": "A-1"}


@pytest.mark.parametrize("allow_private", [True, False])
def test_endpoint_refuses_a_host_the_sender_cannot_send_to(
    app, client, headers, agent_id, allow_private
):
    app.config["ALLOW_PRIVATE_URLS"] = allow_private
    fullwidth = "\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54"  # localhost
    response = create(client, headers, agent_id, endpoint=f"https://{fullwidth}/orders")
    error = assert_error(response, 422, "validation_error")
    assert "not a valid host name" in error["details"]["endpoint"][0]
    assert Function.select().count() == 0
