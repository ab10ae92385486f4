"""Idempotency-Key on every POST of the tenant API: replay, reuse, in progress, what is stored,
tenant scope, bad keys, what ignores the header, and the change landing with its answer."""

from datetime import timedelta

import pytest
from flask.views import MethodView

from app import db, queue
from app.db import database
from app.models import Agent, Delivery, Event, Function, IdempotencyKey, Webhook
from app.resources.common import TenantBlueprint
from app.services import agents as agent_service
from app.services import idempotency as idempotency_service
from app.services import keys as key_service
from app.util import utcnow
from tests.call_flow import RUNTIME, start
from tests.helpers import ACTOR, assert_error
from tests.receiver import Answer, Receiver

AGENTS = "/api/v1/agents"
AGENT = {"name": "Reception", "systemPrompt": "Be helpful."}
WEBHOOK_SECRET = "idempotent-secret-value"


def keyed(headers, key="order-4711"):
    return {**headers, "Idempotency-Key": key}


FUNCTION = {
    "name": "lookup",
    "description": "Look up an order.",
    "endpoint": "http://127.0.0.1:9/f",
    "parameters": {"type": "object", "properties": {}},
}


def webhook_body(url="http://127.0.0.1:9/in"):
    return {"url": url, "events": ["call.ended"], "secret": WEBHOOK_SECRET}


def take(tenant, key, fingerprint="f" * 64):
    """Take a key as a request in another process would, and leave it running."""
    record = idempotency_service.begin(tenant=tenant, key=key, fingerprint=fingerprint)
    assert isinstance(record, IdempotencyKey)
    return record


# The three outcomes


def test_repeat_answers_the_first_answer_again_and_creates_nothing(client, headers):
    first = client.post(AGENTS, json=AGENT, headers=keyed(headers))
    again = client.post(AGENTS, json=AGENT, headers=keyed(headers))
    assert first.status_code == again.status_code == 201
    assert again.data == first.data
    assert again.headers["Content-Type"] == first.headers["Content-Type"] == "application/json"
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert again.headers["X-Request-Id"] != first.headers["X-Request-Id"]
    assert int(again.headers["X-RateLimit-Remaining"]) < int(first.headers["X-RateLimit-Remaining"])
    assert Agent.select().count() == 1


def test_without_a_key_a_repeat_creates_again(client, headers):
    client.post(AGENTS, json=AGENT, headers=headers)
    again = client.post(AGENTS, json=AGENT, headers=headers)
    assert again.status_code == 201 and "Idempotent-Replayed" not in again.headers
    assert Agent.select().count() == 2
    assert IdempotencyKey.select().count() == 0


def test_same_key_with_another_body_is_idempotency_key_reused(client, headers):
    client.post(AGENTS, json=AGENT, headers=keyed(headers))
    response = client.post(AGENTS, json={**AGENT, "name": "Sales"}, headers=keyed(headers))
    error = assert_error(response, 422, "idempotency_key_reused")
    assert error["message"] == (
        "This Idempotency-Key was already used for another request (a different method, path "
        "or body): use a new key for a new request."
    )
    assert error["details"] == {}
    assert [agent.name for agent in Agent.select()] == ["Reception"]


def test_same_body_byte_for_byte_is_the_same_request(client, headers):
    client.post(AGENTS, data=b'{"name": "A", "systemPrompt": "x"}', headers=keyed(headers),
                content_type="application/json")  # fmt: skip
    reordered = client.post(AGENTS, data=b'{"systemPrompt": "x", "name": "A"}',
                            headers=keyed(headers), content_type="application/json")  # fmt: skip
    assert_error(reordered, 422, "idempotency_key_reused")


def test_same_key_on_another_path_is_idempotency_key_reused(client, headers, agent_id):
    client.post(AGENTS, json=AGENT, headers=keyed(headers))
    response = client.post("/api/v1/webhooks", json=webhook_body(), headers=keyed(headers))
    assert_error(response, 422, "idempotency_key_reused")
    other_query = client.post(AGENTS + "?x=1", json=AGENT, headers=keyed(headers))
    assert_error(other_query, 422, "idempotency_key_reused")
    assert Webhook.select().count() == 0


def test_repeat_while_the_first_runs_is_idempotency_in_progress(client, headers, tenant):
    body = b'{"name": "Reception", "systemPrompt": "Be helpful."}'
    running = take(
        tenant, "order-4711", idempotency_service.fingerprint(method="POST", target=AGENTS + "?",
                                                              body=body)
    )  # fmt: skip
    response = client.post(AGENTS, data=body, headers=keyed(headers),
                           content_type="application/json")  # fmt: skip
    error = assert_error(response, 409, "idempotency_in_progress")
    assert error["message"] == (
        "A request with this Idempotency-Key is still running: retry once it has answered."
    )
    assert Agent.select().count() == 0
    assert IdempotencyKey.get().id == running.id  # still the first request's


def test_another_body_while_the_first_runs_is_reused_not_in_progress(client, headers, tenant):
    take(tenant, "order-4711")
    response = client.post(AGENTS, json=AGENT, headers=keyed(headers))
    assert_error(response, 422, "idempotency_key_reused")


def test_a_key_whose_request_died_is_taken_again_once_its_lease_lapses(client, headers, tenant):
    take(tenant, "order-4711")  # its process died: never finished, never released
    assert_error(client.post(AGENTS, json=AGENT, headers=keyed(headers)), 422,
                 "idempotency_key_reused")  # fmt: skip
    IdempotencyKey.update(lease_until=utcnow() - timedelta(seconds=1)).execute()
    response = client.post(AGENTS, json=AGENT, headers=keyed(headers))
    assert response.status_code == 201 and "Idempotent-Replayed" not in response.headers
    again = client.post(AGENTS, json=AGENT, headers=keyed(headers))
    assert again.headers["Idempotent-Replayed"] == "true" and again.data == response.data
    assert Agent.select().count() == 1


def test_the_lease_is_the_configured_one(app, tenant):
    app.config["IDEMPOTENCY_LEASE_SECONDS"] = 90
    take(tenant, "k")
    held = IdempotencyKey.get()
    assert held.lease_until - held.created_at == timedelta(seconds=90)


def test_after_24_hours_the_key_is_free_again(client, headers):
    first = client.post(AGENTS, json=AGENT, headers=keyed(headers))
    IdempotencyKey.update(created_at=utcnow() - timedelta(hours=23, minutes=59)).execute()
    assert client.post(AGENTS, json=AGENT, headers=keyed(headers)).data == first.data
    IdempotencyKey.update(created_at=utcnow() - timedelta(hours=24, seconds=1)).execute()
    later = client.post(AGENTS, json={**AGENT, "name": "Sales"}, headers=keyed(headers))
    assert later.status_code == 201 and "Idempotent-Replayed" not in later.headers
    assert later.json["id"] != first.json["id"]
    assert Agent.select().count() == 2


# What is stored


def test_a_4xx_answer_is_stored_and_replayed_even_once_the_state_changed(client, headers):
    created = client.post("/api/v1/webhooks", json=webhook_body(), headers=headers).json
    path = f"/api/v1/webhooks/{created['id']}/test"
    client.patch(f"/api/v1/webhooks/{created['id']}", json={"isActive": False}, headers=headers)
    refused = client.post(path, headers=keyed(headers))
    first = assert_error(refused, 409, "conflict")
    client.patch(f"/api/v1/webhooks/{created['id']}", json={"isActive": True}, headers=headers)
    again = client.post(path, headers=keyed(headers))
    assert again.status_code == 409 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json == {"error": first}  # the first answer, its requestId included
    assert Delivery.select().count() == 0
    assert client.post(path, headers=keyed(headers, "another")).status_code == 202


def test_a_validation_error_is_stored_and_replayed(client, headers):
    first = client.post(AGENTS, json={"name": ""}, headers=keyed(headers))
    assert_error(first, 422, "validation_error")
    again = client.post(AGENTS, json={"name": ""}, headers=keyed(headers))
    assert again.status_code == 422 and again.data == first.data
    assert again.headers["Idempotent-Replayed"] == "true"


def test_a_404_is_stored_and_replayed(client, headers):
    path = f"{AGENTS}/agent_nosuchagentxxxxxxxx/functions"
    first = client.post(path, json=FUNCTION, headers=keyed(headers))
    assert_error(first, 404, "not_found")
    again = client.post(path, json=FUNCTION, headers=keyed(headers))
    assert again.status_code == 404 and again.headers["Idempotent-Replayed"] == "true"


def failing_create(**fields):
    """Create the agent, then fail as a bug would: the view answers 500."""
    agent_service.create_agent_unpatched(**fields)
    raise RuntimeError("boom")


@pytest.fixture
def create_fails(monkeypatch):
    monkeypatch.setattr(agent_service, "create_agent_unpatched", agent_service.create_agent,
                        raising=False)  # fmt: skip
    monkeypatch.setattr(agent_service, "create_agent", failing_create)


def test_a_5xx_is_not_stored_undoes_the_change_and_frees_the_key(
    client, headers, create_fails, monkeypatch
):
    response = client.post(AGENTS, json=AGENT, headers=keyed(headers))
    assert_error(response, 500, "internal_error")
    assert IdempotencyKey.select().count() == 0
    assert Agent.select().count() == 0  # created in the request's transaction, rolled back
    monkeypatch.undo()
    retried = client.post(AGENTS, json=AGENT, headers=keyed(headers))
    assert retried.status_code == 201 and "Idempotent-Replayed" not in retried.headers
    assert Agent.select().count() == 1


def test_without_a_key_a_5xx_keeps_what_the_view_committed(client, headers, create_fails):
    assert_error(client.post(AGENTS, json=AGENT, headers=headers), 500, "internal_error")
    assert Agent.select().count() == 1  # what the key's transaction adds: the undo above


def test_a_failure_storing_the_answer_undoes_the_change(app, client, headers, monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(idempotency_service, "finish", broken)
    app.config["PROPAGATE_EXCEPTIONS"] = False  # as in production: the error is answered
    assert_error(client.post(AGENTS, json=AGENT, headers=keyed(headers)), 500, "internal_error")
    assert Agent.select().count() == 0
    assert IdempotencyKey.select().count() == 0


def test_a_request_that_lost_its_key_to_a_repeat_is_undone(client, headers, monkeypatch):
    # It ran past its lease and a repeat took the key over: the repeat makes the change.
    monkeypatch.setattr(idempotency_service, "finish", lambda **kwargs: False)
    response = client.post(AGENTS, json=AGENT, headers=keyed(headers))
    assert "took the key over" in assert_error(response, 409, "idempotency_in_progress")["message"]
    assert Agent.select().count() == 0


def test_the_stored_answer_keeps_content_type_and_location_only(client, headers):
    client.post(AGENTS, json=AGENT, headers=keyed(headers))
    assert IdempotencyKey.get().headers == {"Content-Type": "application/json"}


# The change and its answer land together; deferred jobs run after the commit


def test_a_deferred_delivery_is_sent_once_after_commit_and_never_on_replay(app, client, headers):
    with Receiver() as receiver:
        created = client.post("/api/v1/webhooks", json=webhook_body(receiver.url),
                              headers=headers).json  # fmt: skip
        path = f"/api/v1/webhooks/{created['id']}/test"
        first = client.post(path, headers=keyed(headers))
        assert first.status_code == 202
        receiver.wait_for(1)
        assert queue.inline_worker(app).wait_idle(5)
        again = client.post(path, headers=keyed(headers))
        assert again.status_code == 202 and again.json == first.json
        assert queue.inline_worker(app).wait_idle(5)
    assert len(receiver.requests) == 1
    assert Delivery.select().count() == 1 and Event.select().count() == 1


def test_the_services_own_transaction_stays_open_for_the_answer(client, headers, monkeypatch):
    """No transaction is open before the service opens its own (after its network work); in a
    keyed request that one stays open until the answer is stored in it."""
    depths = []

    def create(**fields):
        before = database.transaction_depth()
        agent = agent_service.create_agent_unpatched(**fields)
        depths.append((before, database.transaction_depth()))
        return agent

    monkeypatch.setattr(agent_service, "create_agent_unpatched", agent_service.create_agent,
                        raising=False)  # fmt: skip
    monkeypatch.setattr(agent_service, "create_agent", create)
    client.post(AGENTS, json=AGENT, headers=headers)
    client.post(AGENTS, json=AGENT, headers=keyed(headers))
    assert depths == [(0, 0), (0, 1)]
    assert database.transaction_depth() == 0
    assert IdempotencyKey.get().state == "done" and Agent.select().count() == 2


@pytest.fixture
def probe_views(app):
    """A tenant blueprint of two POSTs reporting whether a transaction is open while they
    work: one that changes nothing (as a function test), one that makes a change first."""
    blp = TenantBlueprint("probe", __name__, url_prefix="/api/v1/probe")

    @blp.route("/read")
    class Read(MethodView):
        def post(self):
            return {"inTransaction": database.in_transaction()}

    @blp.route("/change")
    class Change(MethodView):
        def post(self):
            with db.unit_of_work():
                pass
            return {"inTransaction": database.in_transaction()}

    app.register_blueprint(blp)


def test_a_request_that_changes_nothing_holds_no_transaction(client, headers, probe_views):
    read = client.post("/api/v1/probe/read", headers=keyed(headers, "a"))
    change = client.post("/api/v1/probe/change", headers=keyed(headers, "b"))
    assert read.json == {"inTransaction": False}
    assert change.json == {"inTransaction": True}  # the change's, open for its answer
    again = client.post("/api/v1/probe/read", headers=keyed(headers, "a"))
    assert again.headers["Idempotent-Replayed"] == "true" and again.json == read.json
    assert database.transaction_depth() == 0


def test_a_keyed_function_test_stores_its_answer_after_the_call(client, headers, agent_id):
    with Receiver(lambda request: Answer(body=b'{"slots": []}')) as endpoint:
        function = {**FUNCTION, "endpoint": endpoint.url + "/f"}
        client.post(f"{AGENTS}/{agent_id}/functions", json=function, headers=headers)
        path = f"{AGENTS}/{agent_id}/functions/lookup/test"
        first = client.post(path, json={"parameters": {}}, headers=keyed(headers))
        again = client.post(path, json={"parameters": {}}, headers=keyed(headers))
    assert first.status_code == 200 and first.json["ok"] is True, first.json
    assert again.headers["Idempotent-Replayed"] == "true" and again.json == first.json
    assert len(endpoint.requests) == 1


# Scope: the tenant


def test_all_keys_of_a_tenant_share_its_idempotency_keys(client, headers, tenant):
    second_key = key_service.create_key(actor=ACTOR, tenant=tenant, name="second")[1]
    first = client.post(AGENTS, json=AGENT, headers=keyed(headers))
    again = client.post(AGENTS, json=AGENT, headers=keyed({"x-api-key": second_key}))
    assert again.headers["Idempotent-Replayed"] == "true" and again.data == first.data
    assert Agent.select().count() == 1


def test_another_tenants_same_key_is_its_own(client, headers, other_headers, other_tenant):
    mine = client.post(AGENTS, json=AGENT, headers=keyed(headers))
    theirs = client.post(AGENTS, json=AGENT, headers=keyed(other_headers))
    assert theirs.status_code == 201 and "Idempotent-Replayed" not in theirs.headers
    assert theirs.json["id"] != mine.json["id"]
    other_body = client.post(
        AGENTS, json={**AGENT, "name": "X"}, headers=keyed(other_headers, "k2")
    )
    assert other_body.status_code == 201
    assert client.post(AGENTS, json=AGENT, headers=keyed(headers, "k2")).status_code == 201
    assert Agent.select().where(Agent.tenant == other_tenant).count() == 2
    assert Agent.select().count() == 4


def test_a_read_key_is_refused_before_a_key_is_taken(client, tenant):
    read_key = key_service.create_key(actor=ACTOR, tenant=tenant, name="r", scope="read")[1]
    response = client.post(AGENTS, json=AGENT, headers=keyed({"x-api-key": read_key}))
    assert_error(response, 403, "insufficient_scope")
    assert IdempotencyKey.select().count() == 0


# Bad keys


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("", "it is empty"),
        ("k" * 256, "it has 256 characters"),
        ("tab\there", "it has a character outside that range"),
        ("del\x7f", "it has a character outside that range"),
        ("caf\u00e9", "it has a character outside that range"),
    ],
)
def test_a_bad_key_is_a_validation_error_naming_the_header(client, headers, key, problem):
    response = client.post(AGENTS, json=AGENT, headers=keyed(headers, key))
    error = assert_error(response, 422, "validation_error")
    assert error["message"] == "Invalid value for the Idempotency-Key header."
    assert error["details"] == {
        "Idempotency-Key": [f"Must be 1 to 255 printable ASCII characters (space to ~); {problem}."]
    }
    assert Agent.select().count() == 0 and IdempotencyKey.select().count() == 0


@pytest.mark.parametrize("key", ["k" * 255, "a", "~ !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}"])
def test_keys_of_1_to_255_printable_characters_are_taken(client, headers, key):
    assert client.post(AGENTS, json=AGENT, headers=keyed(headers, key)).status_code == 201
    assert client.post(AGENTS, json=AGENT, headers=keyed(headers, key)).status_code == 201
    assert IdempotencyKey.get().key == key and Agent.select().count() == 1


def test_a_request_the_input_guards_refuse_takes_no_key(client, headers):
    too_large = '{"name": "' + "x" * (1024 * 1024) + '"}'
    response = client.post(AGENTS, data=too_large, headers=keyed(headers),
                           content_type="application/json")  # fmt: skip
    assert_error(response, 413, "payload_too_large")
    not_json = client.post(AGENTS, data="name=x", headers=keyed(headers),
                           content_type="application/x-www-form-urlencoded")  # fmt: skip
    assert_error(not_json, 415, "unsupported_media_type")
    assert IdempotencyKey.select().count() == 0
    assert client.post(AGENTS, json=AGENT, headers=keyed(headers)).status_code == 201


# What ignores the header


def test_get_patch_and_delete_ignore_the_header(client, headers, agent_id):
    bad = keyed(headers, "")
    assert client.get(AGENTS, headers=bad).status_code == 200
    first = client.patch(f"{AGENTS}/{agent_id}", json={"name": "One"}, headers=keyed(headers))
    second = client.patch(f"{AGENTS}/{agent_id}", json={"name": "Two"}, headers=keyed(headers))
    assert first.status_code == second.status_code == 200
    assert "Idempotent-Replayed" not in second.headers and second.json["name"] == "Two"
    assert client.delete(f"{AGENTS}/{agent_id}", headers=keyed(headers)).status_code == 204
    assert_error(client.delete(f"{AGENTS}/{agent_id}", headers=keyed(headers)), 404, "not_found")
    assert IdempotencyKey.select().count() == 0


def test_the_runtime_api_ignores_the_header(client, headers, runtime_headers, did):
    call_id = start(client, runtime_headers, did).json["id"]
    path = f"{RUNTIME}/{call_id}/transcript"
    for summary in ("Booked.", "Booked for Monday."):
        response = client.post(path, json={"transcriptSummary": summary},
                               headers=keyed(runtime_headers, "same"))  # fmt: skip
        assert response.status_code == 200 and "Idempotent-Replayed" not in response.headers
    assert response.json["transcriptSummary"] == "Booked for Monday."
    bad = client.post(path, json={"transcriptSummary": "x"}, headers=keyed(runtime_headers, ""))
    assert bad.status_code == 200
    assert IdempotencyKey.select().count() == 0


def test_the_dashboard_ignores_the_header(client, app):
    page = client.get("/dashboard/sign-in")
    response = client.post(
        "/dashboard/sign-in",
        data={"email": "nobody@acme.test", "password": "wrong"},
        headers={"Idempotency-Key": ""},
    )
    assert page.status_code == 200 and response.status_code in (200, 400)
    assert "Idempotent-Replayed" not in response.headers
    assert IdempotencyKey.select().count() == 0


def test_a_function_created_twice_with_one_key_exists_once(client, headers, agent_id):
    path = f"{AGENTS}/{agent_id}/functions"
    first = client.post(path, json=FUNCTION, headers=keyed(headers))
    again = client.post(path, json=FUNCTION, headers=keyed(headers))
    assert first.status_code == again.status_code == 201
    # The one-time signing secret is answered again to the repeat: the client lost it too.
    assert again.json["signingSecret"] == first.json["signingSecret"]
    assert Function.select().count() == 1
