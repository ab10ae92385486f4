"""The runtime's lookup of a WhatsApp number by Meta's id, with its account's secrets."""

import pytest

from app.models import PhoneNumber
from app.services import phone_numbers as number_service
from app.services.whatsapp import accounts as account_service
from tests.fake_graph import number
from tests.helpers import ACTOR, assert_error

LOOKUP = "/internal/v1/whatsapp/numbers"
TOKEN = "EAAG-runtime-lookup-token-1234"
APP_SECRET = "runtime-lookup-app-secret"


@pytest.fixture
def account(tenant, fake_graph):
    fake_graph.add_waba("6001", TOKEN, [number("6101", "+62 811-600-0001")])
    return account_service.link(
        actor=ACTOR, tenant=tenant, waba_id="6001", access_token=TOKEN, app_secret=APP_SECRET
    ).account


def test_a_known_number_comes_with_its_accounts_secrets(app, client, runtime_headers, account):
    response = client.get(f"{LOOKUP}/6101", headers=runtime_headers)
    assert response.status_code == 200
    imported = PhoneNumber.get(PhoneNumber.whatsapp_phone_number_id == "6101")
    assert response.json == {
        "phoneNumberId": imported.id,
        "whatsappPhoneNumberId": "6101",
        "displayNumber": "+628116000001",
        "accessToken": TOKEN,
        "appSecret": APP_SECRET,
        "graphUrl": app.config["WHATSAPP_GRAPH_URL"],
    }
    assert response.headers["Cache-Control"] == "no-store"


def test_an_unknown_number_is_not_found(client, runtime_headers, account, tenant):
    # A phone-channel number has no Meta id to be found by.
    number_service.add_number(actor=ACTOR, tenant=tenant, display_number="+6221555010")
    for meta_id in ("6999", "+6221555010"):
        assert_error(client.get(f"{LOOKUP}/{meta_id}", headers=runtime_headers), 404, "not_found")


def test_an_inactive_or_unlinked_number_is_not_found(client, runtime_headers, account, fake_graph):
    fake_graph.wabas["6001"].numbers.clear()
    account_service.sync(actor=ACTOR, tenant=account.tenant, account_id=account.id)
    assert_error(client.get(f"{LOOKUP}/6101", headers=runtime_headers), 404, "not_found")
    account_service.unlink(actor=ACTOR, tenant=account.tenant, account_id=account.id)
    assert_error(client.get(f"{LOOKUP}/6101", headers=runtime_headers), 404, "not_found")


def test_the_lookup_needs_the_runtime_token(client, headers, account):
    assert_error(client.get(f"{LOOKUP}/6101"), 401, "unauthorized")
    wrong = {"Authorization": "Bearer not-the-runtime-token"}
    assert_error(client.get(f"{LOOKUP}/6101", headers=wrong), 401, "unauthorized")
    assert_error(client.get(f"{LOOKUP}/6101", headers=headers), 401, "unauthorized")
