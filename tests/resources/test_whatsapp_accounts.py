"""WhatsApp Business accounts through the API, against the Graph API stand-in on 127.0.0.1:
link and import, sync, Meta's errors storing nothing, the caps, the secrets never shown."""

import logging
import threading
import time

import pytest

from app.models import AuditEntry, Event, PhoneNumber, WhatsAppAccount
from app.services import keys as key_service
from app.services import phone_numbers as number_service
from tests.fake_graph import number
from tests.helpers import ACTOR, assert_error

API = "/api/v1/whatsapp/accounts"
WABA = "102290129340398"
TOKEN = "EAAGm0PX4ZCpsBAtest-system-user-token-Zq9x"
APP_SECRET = "5f0c1b2a-app-secret-7e41d9"
FIELDS = ["id", "wabaId", "label", "tokenHint", "status", "numbers", "lastSyncedAt", "createdAt"]
NUMBER_FIELDS = [
    "id",
    "displayNumber",
    "label",
    "isActive",
    "agentId",
    "agentVersion",
    "channel",
    "whatsappPhoneNumberId",
    "qualityRating",
    "createdAt",
]


def numbers(count, start=0):
    return [
        number(f"1065{i:04d}", f"+62 811-000-{i:04d}", name=f"Toko {i}")
        for i in range(start, start + count)
    ]


def link_body(waba=WABA, token=TOKEN, secret=APP_SECRET, **extra):
    return {"wabaId": waba, "accessToken": token, "appSecret": secret, **extra}


def nothing_stored():
    assert WhatsAppAccount.select().count() == 0
    assert PhoneNumber.select().where(PhoneNumber.channel == "whatsapp").count() == 0
    assert not AuditEntry.select().where(AuditEntry.action.startswith("whatsapp.")).exists()


@pytest.fixture
def waba(fake_graph):
    return fake_graph.add_waba(WABA, TOKEN, numbers(5))


@pytest.fixture
def linked(client, headers, waba, fake_graph):
    response = client.post(API, json=link_body(label="Jakarta"), headers=headers)
    assert response.status_code == 201, response.json
    fake_graph.receiver.requests.clear()
    return response.json


# Link


def test_link_reads_every_page_and_imports_each_number(client, headers, waba, fake_graph):
    response = client.post(API, json=link_body(label="Jakarta"), headers=headers)
    assert response.status_code == 201, response.json
    account = response.json
    assert list(account) == [*FIELDS, "skipped"]
    assert account["id"].startswith("waa_") and len(account["id"]) == 24
    assert account["wabaId"] == WABA
    assert account["label"] == "Jakarta"
    assert account["tokenHint"] == TOKEN[-4:]
    assert account["status"] == "connected"
    assert account["skipped"] == []
    assert account["lastSyncedAt"].endswith("Z")
    first = account["numbers"][0]
    assert list(first) == NUMBER_FIELDS
    assert [item["displayNumber"] for item in account["numbers"]] == [
        f"+62811000{i:04d}" for i in range(5)
    ]
    assert first["channel"] == "whatsapp"
    assert first["whatsappPhoneNumberId"] == "10650000"
    assert first["label"] == "Toko 0"
    assert first["qualityRating"] == "GREEN"
    assert first["isActive"] is True and first["agentId"] is None
    # 5 numbers in pages of 2: 3 requests, each with the tenant's token, the cursor after.
    requests = fake_graph.requests
    assert [(request.method, request.path.split("?")[0]) for request in requests] == [
        ("GET", f"/v23.0/{WABA}/phone_numbers")
    ] * 3
    assert fake_graph.tokens_seen() == [TOKEN] * 3
    assert "after=2" in requests[1].path and "after=4" in requests[2].path
    [entry] = AuditEntry.select().where(AuditEntry.action == "whatsapp.linked")
    assert entry.target_id == account["id"]
    assert entry.details == {
        "wabaId": WABA,
        "added": 5,
        "updated": 0,
        "deactivated": 0,
        "skipped": 0,
    }


def test_imported_numbers_are_listed_by_channel(client, headers, tenant, linked):
    number_service.add_number(actor=ACTOR, tenant=tenant, display_number="+6221555010")
    everything = client.get("/api/v1/phone-numbers", headers=headers).json["phoneNumbers"]
    assert len(everything) == 6
    whatsapp = client.get("/api/v1/phone-numbers?channel=whatsapp", headers=headers).json
    assert sorted(item["displayNumber"] for item in whatsapp["phoneNumbers"]) == [
        item["displayNumber"] for item in linked["numbers"]
    ]
    [phone] = client.get("/api/v1/phone-numbers?channel=phone", headers=headers).json[
        "phoneNumbers"
    ]
    assert phone["channel"] == "phone"
    assert (phone["whatsappPhoneNumberId"], phone["qualityRating"]) == (None, None)
    error = assert_error(
        client.get("/api/v1/phone-numbers?channel=sms", headers=headers), 422, "validation_error"
    )
    assert list(error["details"]) == ["channel"]


def test_a_number_another_tenant_holds_is_skipped_with_its_reason(
    client, headers, other_tenant, waba
):
    number_service.add_number(actor=ACTOR, tenant=other_tenant, display_number="+628110000002")
    waba.numbers.append(number("10659999", "not a number"))
    response = client.post(API, json=link_body(), headers=headers)
    assert response.status_code == 201
    assert response.json["skipped"] == [
        {"displayNumber": "+628110000002", "reason": "+628110000002 is another tenant's number."},
        {"displayNumber": "+", "reason": "'not a number' is not an international number (E.164)."},
    ]
    assert len(response.json["numbers"]) == 4
    held = PhoneNumber.get(PhoneNumber.display_number == "+628110000002")
    assert held.tenant_id == other_tenant.id and held.channel == "phone"


@pytest.mark.parametrize(
    ("failure", "status", "code"),
    [
        ("auth", 422, "whatsapp_auth_failed"),
        ("server", 502, "whatsapp_unavailable"),
        ("rate", 429, "whatsapp_rate_limited"),
        ("unknown_waba", 422, "whatsapp_rejected"),
    ],
)
def test_metas_refusals_store_nothing(client, headers, waba, fake_graph, failure, status, code):
    fake_graph.fail[TOKEN] = failure
    error = assert_error(client.post(API, json=link_body(), headers=headers), status, code)
    assert TOKEN not in str(error) and APP_SECRET not in str(error)
    nothing_stored()


def test_a_wrong_token_is_auth_failed(client, headers, waba):
    response = client.post(API, json=link_body(token="EAAG-wrong-token-0000"), headers=headers)
    error = assert_error(response, 422, "whatsapp_auth_failed")
    assert error["details"]["metaCode"] == 190
    nothing_stored()


def test_a_slow_meta_is_unavailable_within_the_deadline(app, client, headers, waba, fake_graph):
    app.config["WHATSAPP_GRAPH_TIMEOUT"] = 0.5
    fake_graph.fail[TOKEN] = ("slow", 3)
    started = time.monotonic()
    assert_error(client.post(API, json=link_body(), headers=headers), 502, "whatsapp_unavailable")
    assert time.monotonic() - started < 2
    nothing_stored()


def test_an_unreachable_meta_is_unavailable(app, client, headers, waba):
    app.config["WHATSAPP_GRAPH_URL"] = "http://127.0.0.1:9/v23.0"  # nothing listens there
    assert_error(client.post(API, json=link_body(), headers=headers), 502, "whatsapp_unavailable")
    nothing_stored()


def test_a_waba_linked_already_is_a_conflict_for_any_tenant(
    client, headers, other_headers, linked, fake_graph
):
    for who in (headers, other_headers):
        error = assert_error(client.post(API, json=link_body(), headers=who), 409, "conflict")
        assert error["details"] == {"wabaId": WABA}
    assert fake_graph.requests == []  # refused before Meta is asked
    assert WhatsAppAccount.select().count() == 1


def test_the_cap_is_limit_reached(app, client, headers, linked, fake_graph):
    app.config["MAX_WHATSAPP_ACCOUNTS_PER_TENANT"] = 1
    fake_graph.add_waba("200", TOKEN, numbers(1, start=10))
    error = assert_error(
        client.post(API, json=link_body(waba="200"), headers=headers), 409, "limit_reached"
    )
    assert error["details"] == {"limit": "whatsappAccounts", "max": 1, "current": 1}
    assert WhatsAppAccount.select().count() == 1


def test_without_secrets_key_linking_is_not_configured(app, client, headers, waba, fake_graph):
    app.config["SECRETS_KEY"] = None
    error = assert_error(client.post(API, json=link_body(), headers=headers), 503, "not_configured")
    assert error["details"] == {"setting": "SECRETS_KEY"}
    assert fake_graph.requests == []
    nothing_stored()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (link_body(waba="12ab"), "wabaId"),
        (link_body(token="short"), "accessToken"),
        (link_body(token="EAAG-token-with-\u00fc-1234"), "accessToken"),  # sent in a header
        (link_body(secret="app secret with spaces"), "appSecret"),
        (link_body(secret=""), "appSecret"),
        (link_body(label="x" * 101), "label"),
        (link_body(extra=1), "extra"),
        ({"wabaId": WABA, "accessToken": TOKEN}, "appSecret"),
    ],
)
def test_invalid_bodies_are_validation_errors(client, headers, fake_graph, body, field):
    error = assert_error(client.post(API, json=body, headers=headers), 422, "validation_error")
    assert field in error["details"]
    assert fake_graph.requests == []


def test_a_link_with_an_idempotency_key_is_made_once(client, headers, waba, fake_graph):
    keyed = {**headers, "Idempotency-Key": "link-1"}
    first = client.post(API, json=link_body(), headers=keyed)
    again = client.post(API, json=link_body(), headers=keyed)
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json == first.json
    assert WhatsAppAccount.select().count() == 1
    assert len(fake_graph.requests) == 3  # the repeat is answered from the stored answer


def test_a_slow_meta_for_one_tenant_holds_up_no_other(
    app, client, headers, other_headers, waba, fake_graph
):
    app.config["WHATSAPP_GRAPH_TIMEOUT"] = 3.0
    fake_graph.add_waba("300", "slow-token-abcdefgh", numbers(1, start=20))
    fake_graph.fail["slow-token-abcdefgh"] = ("slow", 2)
    slow_client = app.test_client()
    answers = []

    def link_slowly():
        with app.app_context():
            body = link_body(waba="300", token="slow-token-abcdefgh")
            answers.append(slow_client.post(API, json=body, headers=other_headers))

    threads = [threading.Thread(target=link_slowly) for _ in range(2)]
    for thread in threads:
        thread.start()
    time.sleep(0.4)
    started = time.monotonic()
    response = client.post(API, json=link_body(), headers=headers)
    elapsed = time.monotonic() - started
    assert response.status_code == 201 and elapsed < 1, elapsed
    for thread in threads:
        thread.join()
    assert sorted(answer.status_code for answer in answers) == [502, 502]


# Read, update, unlink


def test_list_and_get_show_the_account_without_secrets(client, headers, linked):
    listed = client.get(API, headers=headers)
    assert listed.status_code == 200
    [account] = listed.json["accounts"]
    assert list(account) == FIELDS
    assert account == {name: linked[name] for name in FIELDS}
    got = client.get(f"{API}/{linked['id']}", headers=headers)
    assert got.status_code == 200 and got.json == account


def test_a_read_key_may_read_and_not_link(client, tenant, linked):
    _, read = key_service.create_key(actor=ACTOR, tenant=tenant, name="reports", scope="read")
    assert client.get(API, headers={"x-api-key": read}).status_code == 200
    for method, path in [("POST", API), ("POST", f"{API}/{linked['id']}/sync")]:
        response = client.open(path, method=method, json=None, headers={"x-api-key": read})
        assert_error(response, 403, "insufficient_scope")
    response = client.delete(f"{API}/{linked['id']}", headers={"x-api-key": read})
    assert_error(response, 403, "insufficient_scope")


def test_update_changes_the_label(client, headers, linked, fake_graph):
    response = client.patch(f"{API}/{linked['id']}", json={"label": "Surabaya"}, headers=headers)
    assert response.status_code == 200
    assert response.json["label"] == "Surabaya"
    assert fake_graph.requests == []  # no new token: Meta is not asked
    [entry] = AuditEntry.select().where(AuditEntry.action == "whatsapp.updated")
    assert entry.details == {"fields": ["label"]}


def test_a_new_token_is_tried_first_and_kept_only_when_meta_accepts_it(
    client, headers, linked, waba, fake_graph
):
    path = f"{API}/{linked['id']}"
    refused = client.patch(path, json={"accessToken": "EAAG-refused-token-9999"}, headers=headers)
    assert_error(refused, 422, "whatsapp_auth_failed")
    assert WhatsAppAccount.get().token_hint == TOKEN[-4:]
    waba.token = "EAAG-rotated-token-5678"
    response = client.patch(
        path,
        json={"accessToken": "EAAG-rotated-token-5678", "appSecret": "new-app-secret-42"},
        headers=headers,
    )
    assert response.status_code == 200
    assert response.json["tokenHint"] == "5678"
    assert fake_graph.tokens_seen()[-1] == "EAAG-rotated-token-5678"
    [entry] = AuditEntry.select().where(AuditEntry.action == "whatsapp.updated")
    assert entry.details == {"fields": ["accessToken", "appSecret"]}
    fake_graph.receiver.requests.clear()
    assert client.post(f"{path}/sync", headers=headers).status_code == 200
    assert fake_graph.tokens_seen() == ["EAAG-rotated-token-5678"] * 3


def test_unlink_deactivates_and_detaches_the_numbers(client, headers, linked):
    response = client.delete(f"{API}/{linked['id']}", headers=headers)
    assert response.status_code == 204 and response.data == b""
    assert WhatsAppAccount.select().count() == 0
    numbers = list(PhoneNumber.select().where(PhoneNumber.channel == "whatsapp"))
    assert len(numbers) == 5
    assert all(not item.is_active and item.whatsapp_account_id is None for item in numbers)
    [entry] = AuditEntry.select().where(AuditEntry.action == "whatsapp.unlinked")
    assert entry.details == {"wabaId": WABA, "numbers": 5}
    assert_error(client.get(f"{API}/{linked['id']}", headers=headers), 404, "not_found")


def test_a_relink_takes_the_numbers_back_with_their_history(client, headers, linked, tenant):
    first = PhoneNumber.get(PhoneNumber.whatsapp_phone_number_id == "10650000")
    assert client.delete(f"{API}/{linked['id']}", headers=headers).status_code == 204
    again = client.post(API, json=link_body(), headers=headers)
    assert again.status_code == 201
    assert again.json["numbers"][0]["id"] == first.id
    assert all(item["isActive"] for item in again.json["numbers"])


def test_another_tenants_account_is_not_found_on_every_route(client, other_headers, linked):
    path = f"{API}/{linked['id']}"
    for method, url, body in [
        ("GET", path, None),
        ("PATCH", path, {"label": "Mine now"}),
        ("POST", f"{path}/sync", None),
        ("DELETE", path, None),
    ]:
        response = client.open(url, method=method, json=body, headers=other_headers)
        assert_error(response, 404, "not_found")
    assert client.get(API, headers=other_headers).json == {"accounts": []}
    assert WhatsAppAccount.get().label == "Jakarta"


# Sync


def test_sync_adds_updates_and_deactivates(client, headers, linked, waba, fake_graph):
    mine = PhoneNumber.get(PhoneNumber.whatsapp_phone_number_id == "10650001")
    mine.label, mine.label_set = "Front desk", True
    mine.save()
    waba.numbers[0]["quality_rating"] = "YELLOW"
    waba.numbers[1]["verified_name"] = "Toko Baru"  # its label is the tenant's: kept
    waba.numbers[2]["verified_name"] = "Toko Baru"  # label not chosen: follows Meta
    del waba.numbers[3]
    waba.numbers.append(number("10650077", "+62 811-000-0077", name="Toko 77", rating="RED"))
    response = client.post(f"{API}/{linked['id']}/sync", headers=headers)
    assert response.status_code == 200, response.json
    body = response.json
    assert list(body) == [*FIELDS, "skipped", "added", "updated", "deactivated"]
    assert (body["added"], body["updated"], body["deactivated"]) == (1, 2, 1)
    assert body["skipped"] == []
    by_id = {item["whatsappPhoneNumberId"]: item for item in body["numbers"]}
    assert by_id["10650000"]["qualityRating"] == "YELLOW"
    assert by_id["10650001"]["label"] == "Front desk"
    assert by_id["10650002"]["label"] == "Toko Baru"
    assert by_id["10650003"]["isActive"] is False  # kept, with its history
    assert (by_id["10650077"]["label"], by_id["10650077"]["qualityRating"]) == ("Toko 77", "RED")
    assert body["lastSyncedAt"] >= linked["lastSyncedAt"]
    assert fake_graph.tokens_seen() == [TOKEN] * 3
    [entry] = AuditEntry.select().where(AuditEntry.action == "whatsapp.synced")
    assert entry.details == {"added": 1, "updated": 2, "deactivated": 1, "skipped": 0}
    # Listed again: reactivated, and counted as updated.
    waba.numbers.append(number("10650003", "+62 811-000-0003", name="Toko 3"))
    again = client.post(f"{API}/{linked['id']}/sync", headers=headers).json
    assert (again["added"], again["updated"], again["deactivated"]) == (0, 1, 0)
    assert all(item["isActive"] for item in again["numbers"])


def test_sync_skips_a_number_another_tenant_holds(client, headers, other_tenant, linked, waba):
    number_service.add_number(actor=ACTOR, tenant=other_tenant, display_number="+628110000055")
    waba.numbers.append(number("10650055", "+62 811-000-0055"))
    body = client.post(f"{API}/{linked['id']}/sync", headers=headers).json
    assert body["skipped"] == [
        {"displayNumber": "+628110000055", "reason": "+628110000055 is another tenant's number."}
    ]
    assert body["added"] == 0


@pytest.mark.parametrize(
    ("failure", "status", "code"),
    [("auth", 422, "whatsapp_auth_failed"), ("server", 502, "whatsapp_unavailable")],
)
def test_a_failed_sync_changes_nothing(
    client, headers, linked, waba, fake_graph, failure, status, code
):
    before = [tuple(row.values()) for row in PhoneNumber.select().dicts()]
    del waba.numbers[:]
    fake_graph.fail[TOKEN] = failure
    assert_error(client.post(f"{API}/{linked['id']}/sync", headers=headers), status, code)
    assert [tuple(row.values()) for row in PhoneNumber.select().dicts()] == before
    assert not AuditEntry.select().where(AuditEntry.action == "whatsapp.synced").exists()


# The secrets


def test_the_secrets_are_never_shown_and_stored_encrypted(
    client, headers, tenant, waba, fake_graph, caplog
):
    caplog.set_level(logging.DEBUG)
    keyed = {**headers, "Idempotency-Key": "link-secrets"}
    answers = [client.post(API, json=link_body(), headers=keyed)]
    account_id = answers[0].json["id"]
    path = f"{API}/{account_id}"
    answers += [
        client.post(API, json=link_body(), headers=keyed),
        client.get(API, headers=headers),
        client.get(path, headers=headers),
        client.patch(path, json={"label": "Renamed", "appSecret": APP_SECRET}, headers=headers),
        client.post(f"{path}/sync", headers=headers),
        client.get("/api/v1/phone-numbers", headers=headers),
        client.get("/api/v1/audit-log", headers=headers),
        client.get("/api/v1/events", headers=headers),
    ]
    fake_graph.fail[TOKEN] = "auth"
    answers.append(client.post(f"{path}/sync", headers=headers))
    assert [answer.status_code for answer in answers] == [201, 201, *[200] * 7, 422]
    for answer in answers:
        text = answer.get_data(as_text=True)
        assert TOKEN not in text and APP_SECRET not in text, answer.request.path
    for entry in AuditEntry.select():
        assert TOKEN not in str(entry.details) and APP_SECRET not in str(entry.details)
    for event in Event.select():
        assert TOKEN not in str(event.data) and APP_SECRET not in str(event.data)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert TOKEN not in logged and APP_SECRET not in logged
    stored = WhatsAppAccount.select().dicts().get()
    assert TOKEN not in str(stored) and APP_SECRET not in str(stored)
    assert stored["access_token_encrypted"].startswith("gAAAA")  # a Fernet token
