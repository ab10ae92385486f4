"""The OpenAPI document: valid, secured, every error response and field documented."""

import re

import pytest
from openapi_schema_validator import OAS30Validator, oas30_format_checker
from openapi_schema_validator import validate as validate_body
from openapi_spec_validator import validate

from app.services import billing
from app.services import phone_numbers as number_service
from tests.call_flow import backdate, end_body
from tests.fake_graph import number as listed_number
from tests.helpers import ACTOR


def spec(client):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    return response.json


def test_openapi_document_is_valid(client):
    validate(spec(client))


def test_docs_page_is_served_with_its_own_assets(client):
    response = client.get("/api/v1/docs")
    assert response.status_code == 200 and b"swagger" in response.data.lower()
    assets = re.findall(r'(?:src|href)="([^"]+)"', response.get_data(as_text=True))
    assert len(assets) == 3  # the CSS and two scripts, none from another host
    for url in assets:
        assert url.startswith("/static/swagger-ui/")
        with client.get(url) as asset:
            assert asset.status_code == 200 and len(asset.data) > 1000, url
    assert client.get("/static/swagger-ui/../../app/config.py").status_code == 404


def test_the_document_holds_the_api_and_health_checks_not_the_pages(client):
    paths = set(spec(client)["paths"])
    assert {path for path in paths if not path.startswith(("/api/v1/", "/internal/v1/"))} == {
        "/healthz",
        "/readyz",
    }
    assert not paths & {"/", "/api/v1/docs", "/api/v1/docs/", "/api/v1/openapi.json"}


def test_every_tenant_operation_is_secured_and_documents_errors(client):
    document = spec(client)
    assert document["components"]["securitySchemes"]["ApiKeyAuth"] == {
        "type": "apiKey",
        "in": "header",
        "name": "x-api-key",
        "description": "A tenant API key (dkl_…), created with `flask keys create`.",
    }
    for path, operations in document["paths"].items():
        if not path.startswith("/api/v1/"):
            continue
        for method, operation in operations.items():
            if method == "parameters":
                continue
            responses = operation["responses"]
            assert operation["security"] == [{"ApiKeyAuth": []}, {"ApiKeyBearer": []}], (
                method,
                path,
            )
            assert {"401", "429", "default"} <= set(responses), (method, path)
            # A read key's write: 403 insufficient_scope (app.auth.require_scope).
            assert ("403" in responses) == (method != "get"), (method, path)
            if "{" in path:
                assert "404" in responses, (method, path)
            if "requestBody" in operation:
                assert {"400", "413", "415", "422"} <= set(responses), (method, path)
            assert operation.get("summary"), (method, path)


def test_error_schema_is_the_documented_body(client):
    """Named ErrorResponse: as Error, with its property `error`, the model openapi-python-client
    generates fails mypy (tests/system/test_generated_client.py runs it)."""
    schemas = spec(client)["components"]["schemas"]
    assert "Error" not in schemas
    error = schemas["ErrorResponse"]
    assert error["required"] == ["error"]
    assert error["properties"]["error"] == {"$ref": "#/components/schemas/ErrorDetail"}
    assert spec(client)["components"]["responses"]["UNAUTHORIZED"]["content"] == {
        "application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}
    }


def test_every_schema_field_is_described(client):
    undescribed = []
    for name, schema in spec(client)["components"]["schemas"].items():
        for field, prop in schema.get("properties", {}).items():
            if "description" not in prop and "$ref" not in prop and prop.get("type") != "array":
                undescribed.append(f"{name}.{field}")
    assert not undescribed


def test_rate_limit_headers_and_429_are_documented(client):
    document = spec(client)
    assert "Rate limits" in document["info"]["description"]
    rate_limited = document["components"]["responses"]["RATE_LIMITED"]
    assert set(rate_limited["headers"]) == {
        "Retry-After",
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
    }
    listing = document["paths"]["/api/v1/agents"]["get"]["responses"]
    assert listing["429"] == {"$ref": "#/components/responses/RATE_LIMITED"}
    assert "X-RateLimit-Reset" in listing["200"]["headers"]


def test_every_tenant_post_documents_the_idempotency_key_and_nothing_else_does(client):
    document = spec(client)
    parameter = document["components"]["parameters"]["Idempotency-Key"]
    assert parameter["in"] == "header" and parameter["required"] is False
    assert parameter["schema"] == {
        "type": "string",
        "minLength": 1,
        "maxLength": 255,
        "pattern": "^[ -~]+$",
    }
    for code in ("idempotency_key_reused", "idempotency_in_progress", "Idempotent-Replayed"):
        assert code in parameter["description"]
    reference = {"$ref": "#/components/parameters/Idempotency-Key"}
    posts = 0
    for path, method, operation in operations(document):
        keyed = reference in operation.get("parameters", [])
        if not (method == "post" and path.startswith("/api/v1/")):
            assert not keyed, (method, path)
            continue
        posts += 1
        assert keyed, path
        responses = operation["responses"]
        assert {"409", "422"} <= set(responses), path
        in_progress = resolve(document, responses["409"])["description"]
        assert "idempotency_in_progress" in in_progress, path
        if "requestBody" not in operation:
            # No body, so no invalid field: the key's own errors, after the view's (Meta's
            # refusal of a WhatsApp sync) if it has any.
            description = resolve(document, responses["422"])["description"]
            assert description.lower().endswith(
                "the idempotency-key header breaks its rule (validation_error) or was used for "
                "another request (idempotency_key_reused)."
            ), path
            assert "Invalid fields" not in description, path
        for status, response in responses.items():
            if status.startswith("2"):
                assert response["headers"]["Idempotent-Replayed"] == {
                    "$ref": "#/components/headers/Idempotent-Replayed"
                }, path
    assert posts >= 6
    replayed = document["components"]["headers"]["Idempotent-Replayed"]
    assert replayed["schema"] == {"type": "string", "enum": ["true"]}


def test_every_tenant_post_route_is_served_by_a_tenant_blueprint(app):
    """The hooks that take the key are the tenant blueprints': every POST the document says
    takes one is served by such a blueprint."""
    from app.resources.common import TenantBlueprint

    for rule in app.url_map.iter_rules():
        if "POST" in (rule.methods or ()) and rule.rule.startswith("/api/v1/"):
            blueprint = app.blueprints[rule.endpoint.split(".")[0]]
            assert isinstance(blueprint, TenantBlueprint), rule.rule


# What a client generated from the document relies on: every property typed, a response
# schema's required fields in every response, no write-only field in a response schema, no
# default a client would send in an update, and an operationId naming each function.

HTTP_METHODS = {"get", "post", "put", "patch", "delete"}


def operations(document):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in HTTP_METHODS:
                yield path, method, operation


def resolve(document, node):
    while "$ref" in node:
        section, kind, name = node["$ref"].removeprefix("#/").split("/")
        node = document[section][kind][name]
    return node


def subschemas(schema):
    """The schemas directly inside schema: properties, items, maps and combinations."""
    yield from schema.get("properties", {}).values()
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield schema[key]
    for key in ("allOf", "oneOf", "anyOf"):
        yield from schema.get(key, [])


def reachable(document, roots):
    """Every component schema name reachable from roots (schemas), through $refs."""
    names, stack = set(), list(roots)
    while stack:
        node = stack.pop()
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[1]
            if name in names:
                continue
            names.add(name)
            node = document["components"]["schemas"][name]
        stack.extend(subschemas(node))
    return names


def body_schemas(document, part):
    """The schemas of every request body (part "request") or every response (part "response")."""
    for _, _, operation in operations(document):
        if part == "request":
            bodies = [operation.get("requestBody", {})]
        else:
            bodies = [resolve(document, r) for r in operation["responses"].values()]
        for body in bodies:
            for media in body.get("content", {}).values():
                yield media["schema"]


def test_every_property_has_a_type(client):
    document = spec(client)
    untyped = []

    def typed(prop):
        # A nullable object is anyOf its schema and a null object: each of them typed.
        if "anyOf" in prop:
            return all(typed(member) for member in prop["anyOf"])
        return bool({"type", "$ref", "allOf", "oneOf"} & set(prop))

    def walk(where, schema):
        for name, prop in schema.get("properties", {}).items():
            if not typed(prop):
                untyped.append(f"{where}.{name}")
            walk(f"{where}.{name}", prop)
        for key in ("items", "additionalProperties"):
            if isinstance(schema.get(key), dict):
                walk(f"{where}[]", schema[key])

    for name, schema in document["components"]["schemas"].items():
        walk(name, schema)
    for part in ("request", "response"):
        for schema in body_schemas(document, part):
            walk(f"a {part} body", schema)
    assert untyped == []


def test_response_schemas_require_only_readable_fields(client):
    """A response schema has no write-only (load_only) field, and requires only its own."""
    document = spec(client)
    names = reachable(document, body_schemas(document, "response"))
    assert {"Agent", "Webhook", "CallDetail", "Delivery", "FunctionCreated"} <= names
    for name in names:
        schema = document["components"]["schemas"][name]
        properties = schema.get("properties", {})
        write_only = [field for field, prop in properties.items() if prop.get("writeOnly")]
        assert write_only == [], name
        assert set(schema.get("required", [])) <= set(properties), name


def test_update_schemas_carry_no_defaults(client):
    """A client sends a body schema's defaults: in an update they would overwrite fields."""
    document = spec(client)
    updates = [
        operation["requestBody"]["content"]["application/json"]["schema"]
        for _, method, operation in operations(document)
        if method == "patch"
    ]
    names = reachable(document, updates)
    assert {"AgentUpdate", "WebhookUpdate", "FunctionUpdate"} <= names
    for name in names:
        properties = document["components"]["schemas"][name].get("properties", {})
        assert [field for field, prop in properties.items() if "default" in prop] == [], name


def test_request_schemas_give_their_defaults_in_words_not_as_default(client):
    """A generator reads a property's `default` as always present: openapi-typescript makes it
    required, so a body that leaves it out would not type-check. The server fills it in, and
    the description says it; a query parameter keeps its `default` (generators leave it
    optional)."""
    document = spec(client)
    names = reachable(document, body_schemas(document, "request"))
    assert {"FunctionCreate", "CampaignCreate", "Retry", "AssignAgent", "CallStart"} <= names
    for name in names:
        properties = document["components"]["schemas"][name].get("properties", {})
        assert [field for field, prop in properties.items() if "default" in prop] == [], name
    schemas = document["components"]["schemas"]
    assert "Default 5000." in schemas["FunctionCreate"]["properties"]["timeoutMs"]["description"]
    assert (
        "(default 1)"
        in schemas["CampaignCreate"]["properties"]["maxConcurrentCalls"]["description"]
    )
    parameters = document["paths"]["/api/v1/events"]["get"]["parameters"]
    (limit,) = [parameter for parameter in parameters if parameter["name"] == "limit"]
    assert limit["schema"]["default"] == 50


NAMED_OPERATIONS = {
    ("get", "/api/v1/agents"): "listAgents",
    ("post", "/api/v1/agents"): "createAgent",
    ("get", "/api/v1/agents/{agent_id}"): "getAgent",
    ("patch", "/api/v1/agents/{agent_id}"): "updateAgent",
    ("delete", "/api/v1/agents/{agent_id}"): "deleteAgent",
    ("get", "/api/v1/phone-numbers"): "listPhoneNumbers",
    ("post", "/api/v1/phone-numbers/{number_id}/assign-agent"): "assignAgent",
    ("get", "/api/v1/calls"): "listCalls",
    ("get", "/api/v1/calls/{call_id}"): "getCall",
    ("get", "/api/v1/calls/{call_id}/transcript"): "getCallTranscript",
    ("get", "/api/v1/usage"): "getUsage",
    ("get", "/api/v1/credits"): "getCredits",
    ("get", "/api/v1/credits/transactions"): "listCreditTransactions",
    ("post", "/api/v1/webhooks"): "createWebhook",
    ("patch", "/api/v1/agents/{agent_id}/functions/{name}"): "updateFunction",
    ("post", "/api/v1/agents/{agent_id}/functions/{name}/test"): "testFunction",
    ("post", "/api/v1/webhooks/{webhook_id}/replay"): "replayWebhook",
    ("get", "/api/v1/events"): "listEvents",
    ("get", "/api/v1/events/{event_id}"): "getEvent",
    ("get", "/api/v1/audit-log"): "listAuditLog",
    ("post", "/internal/v1/calls"): "startCall",
}


def test_every_operation_has_a_unique_operation_id_and_a_tag(client):
    """The operationId names a generated client's function (list_agents, not
    get_api_v1_agents); the tag names its module."""
    ids = {}
    for path, method, operation in operations(spec(client)):
        operation_id = operation.get("operationId", "")
        assert re.fullmatch(r"[a-z]+(?:[A-Z][a-z]*)*", operation_id), (method, path)
        assert operation.get("tags"), (method, path)
        ids[method, path] = operation_id
    assert len(set(ids.values())) == len(ids)
    assert {key: ids[key] for key in NAMED_OPERATIONS} == NAMED_OPERATIONS


def missing_fields(document, schema, body, where="") -> list[str]:
    """The required fields body lacks, at any depth, read literally as a generated client
    reads them (OpenAPI's validators forgive a missing required write-only field)."""
    schema = resolve(document, schema)
    if "discriminator" in schema and isinstance(body, dict):  # the variant body names
        discriminator = schema["discriminator"]
        variant = discriminator["mapping"][body[discriminator["propertyName"]]]
        return missing_fields(document, {"$ref": variant}, body, where)
    if "allOf" in schema:  # a described reference: {"description", "allOf": [{"$ref"}]}
        parts = schema["allOf"]
        return [gap for part in parts for gap in missing_fields(document, part, body, where)]
    if isinstance(body, list) and "items" in schema:
        return [
            gap
            for index, item in enumerate(body)
            for gap in missing_fields(document, schema["items"], item, f"{where}[{index}]")
        ]
    if not isinstance(body, dict):
        return []
    missing = [f"{where}.{name}" for name in schema.get("required", []) if name not in body]
    for name, prop in schema.get("properties", {}).items():
        if name in body:
            missing += missing_fields(document, prop, body[name], f"{where}.{name}")
    return missing


def answers_as_documented(document, method, template, response):
    """The response's status is documented for the operation and its body matches the schema."""
    responses = document["paths"][template][method]["responses"]
    assert str(response.status_code) in responses, (method, template, response.json)
    content = resolve(document, responses[str(response.status_code)]).get("content")
    if content is None:
        assert not response.data
        return None
    schema = {**content["application/json"]["schema"], "components": document["components"]}
    validate_body(response.json, schema, cls=OAS30Validator, format_checker=oas30_format_checker)
    assert missing_fields(document, schema, response.json) == [], (method, template)
    return response.json


def test_minimal_records_answer_as_their_response_schemas(
    client, headers, tenant, runtime_headers, fake_graph
):
    """Records made of required fields only (nulls and defaults elsewhere), through every
    operation that returns them: each body carries every field its schema requires."""
    document = spec(client)
    number = number_service.add_number(actor=ACTOR, tenant=tenant, display_number="+6221555099")
    billing.grant(actor=ACTOR, tenant=tenant, minutes=10)

    def call(method, template, body=None, auth=headers, **ids):
        response = client.open(
            template.format(**ids), method=method.upper(), json=body, headers=auth
        )
        assert response.status_code < 300, response.get_data(as_text=True)
        return answers_as_documented(document, method, template, response)

    agent = call("post", "/api/v1/agents", {"name": "Minimal", "systemPrompt": "Hi."})
    agent_id = agent["id"]
    call("get", "/api/v1/agents")
    call("get", "/api/v1/agents/{agent_id}", agent_id=agent_id)
    call("patch", "/api/v1/agents/{agent_id}", {"name": "Renamed"}, agent_id=agent_id)
    call("get", "/api/v1/phone-numbers")
    assign = "/api/v1/phone-numbers/{number_id}/assign-agent"
    call("post", assign, {"agentId": agent_id}, number_id=number.id)
    fake_graph.add_waba("9001", "EAAG-minimal-token", [listed_number("9101", "+62 811-900-0001")])
    link = {"wabaId": "9001", "accessToken": "EAAG-minimal-token", "appSecret": "minimal-secret"}
    accounts = "/api/v1/whatsapp/accounts"
    account_id = call("post", accounts, link)["id"]
    call("get", accounts)
    call("get", accounts + "/{account_id}", account_id=account_id)
    call("patch", accounts + "/{account_id}", {"label": "Main"}, account_id=account_id)
    call("post", accounts + "/{account_id}/sync", account_id=account_id)
    lookup = "/internal/v1/whatsapp/numbers/{whatsapp_phone_number_id}"
    call("get", lookup, auth=runtime_headers, whatsapp_phone_number_id="9101")
    call("delete", accounts + "/{account_id}", account_id=account_id)
    functions = "/api/v1/agents/{agent_id}/functions"
    function = {
        "name": "lookup",
        "description": "Look it up.",
        "endpoint": "http://127.0.0.1:9/lookup",
        "parameters": {"type": "object"},
    }
    call("post", functions, function, agent_id=agent_id)
    call("get", functions, agent_id=agent_id)
    function_path = functions + "/{name}"
    call("patch", function_path, {"timeoutMs": 500}, agent_id=agent_id, name="lookup")
    tested = call("post", function_path + "/test", {}, agent_id=agent_id, name="lookup")
    assert tested["error"]["code"] == "function_unreachable"
    tested = call(
        "post", function_path + "/test", {"parameters": {"x": 1}}, agent_id=agent_id, name="lookup"
    )
    assert tested["error"]["code"] == "invalid_parameters"
    webhook = {"url": "http://127.0.0.1:9/in", "events": ["call.ended"], "secret": "s" * 16}
    webhook_id = call("post", "/api/v1/webhooks", webhook)["id"]
    call("get", "/api/v1/webhooks")
    call("get", "/api/v1/webhooks/{webhook_id}", webhook_id=webhook_id)
    call(
        "patch",
        "/api/v1/webhooks/{webhook_id}",
        {"events": ["call.started"]},
        webhook_id=webhook_id,
    )
    delivery = call("post", "/api/v1/webhooks/{webhook_id}/test", webhook_id=webhook_id)
    call("get", "/api/v1/webhooks/{webhook_id}/deliveries", webhook_id=webhook_id)
    retry = "/api/v1/webhooks/deliveries/{delivery_id}/retry"
    call("post", retry, delivery_id=delivery["id"])
    call("get", "/api/v1/events")
    call("get", "/api/v1/events/{event_id}", event_id=delivery["eventId"])
    replay = "/api/v1/webhooks/{webhook_id}/replay"
    call("post", replay, {"since": "2000-01-01T00:00:00Z"}, webhook_id=webhook_id)
    runtime = {"auth": runtime_headers}
    started = {"did": number.display_number, "callerNumber": "+6281234567"}
    call_id = call("post", "/internal/v1/calls", started, **runtime)["id"]
    call("get", "/api/v1/calls")
    call("get", "/api/v1/calls/{call_id}", call_id=call_id)
    call("get", "/api/v1/calls/{call_id}/transcript", call_id=call_id)
    backdate(call_id, end_body()["durationSeconds"])  # it lived as long as its end reports
    steps = [
        ("answered", {}),
        ("transcript", {"transcriptSummary": "Fine."}),
        ("transcript", {"turns": [{"role": "caller", "text": "Hi."}]}),
        ("function-calls", {"functionName": "nothing"}),
        ("ended", end_body(aiCostIdr=None, costBreakdown={})),
    ]
    for step, body in steps:
        body = {name: value for name, value in body.items() if value is not None}
        call("post", "/internal/v1/calls/{call_id}/" + step, body, call_id=call_id, **runtime)
    call("get", "/api/v1/calls/{call_id}", call_id=call_id)
    call("get", "/api/v1/calls/{call_id}/transcript", call_id=call_id)
    call("get", "/api/v1/usage")
    call("get", "/api/v1/credits")
    call("get", "/api/v1/credits/transactions")
    log = call("get", "/api/v1/audit-log")
    assert log["entries"][-1]["actor"] == {"type": "system", "id": None, "label": "System"}
    call("get", "/healthz", auth={})
    call("get", "/readyz", auth={})


def test_the_event_log_and_replay_document_their_answers(client):
    """Their tag, their own request and response schemas, and each error they can answer."""
    document = spec(client)
    paths = document["paths"]
    listing = paths["/api/v1/events"]["get"]
    detail = paths["/api/v1/events/{event_id}"]["get"]
    replay = paths["/api/v1/webhooks/{webhook_id}/replay"]["post"]
    assert listing["tags"] == detail["tags"] == ["events"] and replay["tags"] == ["webhooks"]
    parameters = {parameter["name"]: parameter for parameter in listing["parameters"]}
    assert set(parameters) == {"after", "types", "limit"}
    types = re.compile(parameters["types"]["schema"]["pattern"])
    assert types.match("call.started,call.ended") and not types.match("call.started,")
    limit = parameters["limit"]["schema"]
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, 100, 50)

    def schema_of(answer):
        return resolve(document, answer)["content"]["application/json"]["schema"]["$ref"]

    assert schema_of(listing["responses"]["200"]).endswith("/EventList")
    assert schema_of(detail["responses"]["200"]).endswith("/EventDetail")
    assert schema_of(replay["responses"]["202"]).endswith("/Replay")
    request = replay["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert request.endswith("/ReplayRequest")
    assert {"404", "422"} <= set(listing["responses"]) and "404" in detail["responses"]
    assert {"404", "409", "422"} <= set(replay["responses"])
    conflicts = resolve(document, replay["responses"]["409"])["description"]
    assert "webhook_disabled" in conflicts and "replay_backlog" in conflicts
    assert "replay_too_large" in resolve(document, replay["responses"]["422"])["description"]
    for union in ("Event", "EventDetail"):
        variants = document["components"]["schemas"][union]["oneOf"]
        for variant in variants:
            properties = list(resolve(document, variant)["properties"])
            assert properties[:4] == ["id", "event", "timestamp", "data"], variant


def test_a_receiver_has_one_schema_to_parse_any_delivery_with(client):
    """WebhookEvent: every event, discriminated by its name, each as its callback sends it."""
    document = spec(client)
    union = document["components"]["schemas"]["WebhookEvent"]
    mapping = union["discriminator"]["mapping"]
    assert union["discriminator"]["propertyName"] == "event"
    assert [ref["$ref"] for ref in union["oneOf"]] == list(mapping.values())
    callbacks = document["paths"]["/api/v1/webhooks"]["post"]["callbacks"]
    assert set(mapping) == set(callbacks)
    for name, callback in callbacks.items():
        body = callback["{$request.body#/url}"]["post"]["requestBody"]["content"]
        assert body["application/json"]["schema"] == {"$ref": mapping[name]}, name
    assert "delivery's body" in union["description"]


UPDATES = [
    (
        "/api/v1/agents",
        {
            "name": "Sales",
            "systemPrompt": "Sell.",
            "voiceId": "Kore",
            "greetingText": "Halo!",
            "language": "en-US",
            "maxCallDurationMinutes": 30,
            "toolsEnabled": ["transfer_call"],
            "isActive": False,
            "escalationNumber": "+6281234567",
        },
        {"name": "Renamed"},
    ),
    (
        "/api/v1/webhooks",
        {"url": "http://127.0.0.1:9/in", "events": ["call.ended"], "secret": "s" * 16},
        {"url": "http://127.0.0.1:9/moved"},
    ),
]


@pytest.mark.parametrize("collection, record, change", UPDATES)
def test_patch_built_from_the_document_changes_only_the_given_field(
    client, headers, collection, record, change
):
    """The body a generated client sends: the update schema's defaults and the one field."""
    document = spec(client)
    item = next(path for path in document["paths"] if re.fullmatch(collection + "/{\\w+}", path))
    body = document["paths"][item]["patch"]["requestBody"]["content"]["application/json"]
    schema = resolve(document, body["schema"])
    sent = {
        name: prop["default"] for name, prop in schema["properties"].items() if "default" in prop
    }
    before = client.post(collection, json=record, headers=headers).json
    response = client.patch(
        f"{collection}/{before['id']}", json={**sent, **change}, headers=headers
    )
    assert response.status_code == 200, response.json
    after = response.json
    changed = {name for name in after if after[name] != before[name]}
    # An agent's version moves with the change, as updatedAt does.
    assert changed - {"updatedAt", "version"} == set(change)
