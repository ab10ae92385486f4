"""Every event's data is a schema of the OpenAPI document, typed exactly as its deliveries send
it: the event log shows each event as recorded, and each one is valid against its schema (no
field left out of the schema, none missing, every type right)."""

import json

import pytest
from openapi_schema_validator import OAS30Validator, oas30_format_checker
from openapi_schema_validator import validate as validate_body

from app.db import database
from app.models import Event
from app.resources.events.payloads import EVENT_DATA
from app.services import events
from app.services import tenants as tenant_service
from app.services.deliveries import wire as delivery_wire
from tests.call_flow import CALLER, RUNTIME, backdate, end_body
from tests.helpers import ACTOR
from tests.helpers import EVENT_DATA as SAMPLES


def document(client):
    return client.get("/api/v1/openapi.json").json


def assert_valid(spec, body, schema="Event"):
    """body is valid against the document's schema of that name."""
    wrapped = {"$ref": f"#/components/schemas/{schema}", "components": spec["components"]}
    validate_body(body, wrapped, cls=OAS30Validator, format_checker=oas30_format_checker)


def test_every_event_the_service_records_has_a_schema():
    assert set(events.LOGGED_TYPES) <= set(EVENT_DATA)
    assert set(SAMPLES) == set(EVENT_DATA)


def test_the_event_union_maps_every_event_to_its_schema(client):
    spec = document(client)
    union = spec["components"]["schemas"]["Event"]
    assert union["discriminator"]["propertyName"] == "event"
    mapping = union["discriminator"]["mapping"]
    assert set(mapping) == set(EVENT_DATA)
    assert [ref["$ref"] for ref in union["oneOf"]] == list(mapping.values())
    ended = spec["components"]["schemas"]["CallEndedEvent"]
    assert ended["properties"]["event"]["enum"] == ["call.ended"]
    assert ended["properties"]["data"]["allOf"] == [{"$ref": "#/components/schemas/CallEndedData"}]
    data = spec["components"]["schemas"]["CallEndedData"]
    assert data["properties"]["durationSeconds"]["type"] == "integer"
    # Added after call.ended was first sent.
    later = {"recordingUrl", "costBreakdown", "agentVersion", "agentId", "direction", "campaignId"}
    assert set(data["required"]) == set(SAMPLES["call.ended"]) - later
    assert data["properties"]["recordingUrl"]["nullable"] is True


def test_the_deliveries_are_described_as_callbacks_of_creating_a_webhook(client):
    spec = document(client)
    callbacks = spec["paths"]["/api/v1/webhooks"]["post"]["callbacks"]
    assert set(callbacks) == set(EVENT_DATA)
    sent = callbacks["call.ended"]["{$request.body#/url}"]["post"]
    body = sent["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/CallEndedEvent"}
    headers = {parameter["name"] for parameter in sent["parameters"]}
    signed = {"webhook-signature", "webhook-id", "webhook-timestamp", "X-Service-Signature"}
    assert signed <= headers


@pytest.mark.parametrize("name", list(SAMPLES))
def test_an_event_is_shown_as_its_deliveries_send_it(client, headers, tenant, name):
    with database.atomic():
        event = events.emit(tenant_id=tenant.id, type=name, data=SAMPLES[name])
    detail = client.get(f"/api/v1/events/{event.id}", headers=headers).json
    assert {key: detail[key] for key in ("id", "event", "timestamp", "data")} == json.loads(
        delivery_wire.event_body(event)
    )
    spec = document(client)
    assert_valid(spec, detail, "EventDetail")
    (listed,) = client.get("/api/v1/events", headers=headers).json["events"]
    assert_valid(spec, listed)


def test_a_calls_events_are_shown_as_recorded_and_valid(
    client, headers, runtime_headers, tenant, did, agent_id
):
    """A whole call through the runtime API: each event it records, as the event log shows
    it, equals what was recorded (nothing dropped) and is valid against its schema."""
    tenant_service.set_threshold(actor=ACTOR, tenant=tenant, minutes=99)  # the charge crosses it
    function = {
        "name": "lookup",
        "description": "Look it up.",
        "endpoint": "http://127.0.0.1:9/lookup",
        "parameters": {"type": "object", "properties": {}},
    }
    created = client.post(f"/api/v1/agents/{agent_id}/functions", json=function, headers=headers)
    assert created.status_code == 201
    hook = {"url": "http://127.0.0.1:9/in", "events": ["call.ended"], "secret": "s" * 16}
    webhook_id = client.post("/api/v1/webhooks", json=hook, headers=headers).json["id"]
    assert client.post(f"/api/v1/webhooks/{webhook_id}/test", headers=headers).status_code == 202
    start = {"did": did, "callerNumber": CALLER}
    started = client.post(RUNTIME, json=start, headers=runtime_headers)
    call_id = started.json["id"]
    backdate(call_id, end_body()["durationSeconds"])  # it lived as long as its end reports
    steps = [
        ("answered", {}),
        ("function-calls", {"functionName": "lookup", "parameters": {}}),
        ("transcript", {"transcriptSummary": "Fine."}),
        ("ended", end_body()),
    ]
    for step, body in steps:
        answer = client.post(f"{RUNTIME}/{call_id}/{step}", json=body, headers=runtime_headers)
        assert answer.status_code == 200, answer.json
    listed = client.get("/api/v1/events", headers=headers).json["events"]
    # campaign.completed comes from a campaign (tests/services/test_campaigns.py shows it),
    # call.analyzed from an analysis (tests/resources/test_call_analysis.py).
    assert {event["event"] for event in listed} == set(events.LOGGED_TYPES) - {
        "campaign.completed",
        "call.analyzed",
    }
    spec = document(client)
    for shown in listed:
        assert shown["data"] == Event.get_by_id(shown["id"]).data, shown["event"]
        assert_valid(spec, shown)
