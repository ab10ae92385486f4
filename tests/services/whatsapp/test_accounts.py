"""The accounts service against the Graph API stand-in: the import rule, what a failure leaves,
how numbers move between a tenant's accounts."""

import pytest

from app.errors import Conflict
from app.models import PhoneNumber, WhatsAppAccount
from app.services import phone_numbers as number_service
from app.services.whatsapp import accounts as account_service
from app.services.whatsapp.graph import GraphError
from app.vault import NotConfigured
from tests.fake_graph import number
from tests.helpers import ACTOR

TOKEN = "EAAG-service-token-0001"


def link(tenant, waba_id="7001", token=TOKEN):
    return account_service.link(
        actor=ACTOR, tenant=tenant, waba_id=waba_id, access_token=token, app_secret="app-secret"
    )


@pytest.mark.parametrize(
    ("listed", "expected"),
    [
        ("+62 811-000-0001", "+628110000001"),
        ("62 811 000 0001", "+628110000001"),
        ("+1 (555) 010-9999", "+15550109999"),
        ("(0811) 000", "+0811000"),
    ],
)
def test_the_display_number_is_plus_and_the_digits(listed, expected):
    assert account_service.display_number(listed) == expected


def test_numbers_that_are_not_e164_are_skipped_with_their_reason(tenant, fake_graph):
    fake_graph.add_waba(
        "7001",
        TOKEN,
        [
            number("1", "+62 811-000-0001"),
            number("2", "(0811) 000"),
            number("3", "+62 8"),
            {"display_phone_number": "+62 811-000-0004"},  # no id
        ],
    )
    imported = link(tenant)
    assert imported.added == 1
    assert [item["display_number"] for item in imported.skipped] == [
        "+0811000",
        "+628",
        "+628110000004",
    ]
    assert "not an international number" in imported.skipped[0]["reason"]
    assert imported.skipped[2]["reason"] == "Meta listed it without a usable id."


def test_a_number_the_tenant_has_on_the_phone_channel_is_skipped(tenant, fake_graph):
    number_service.add_number(actor=ACTOR, tenant=tenant, display_number="+628110000001")
    fake_graph.add_waba("7001", TOKEN, [number("1", "+62 811-000-0001")])
    imported = link(tenant)
    assert imported.skipped == [
        {
            "display_number": "+628110000001",
            "reason": "+628110000001 is one of your numbers already, on the phone channel.",
        }
    ]
    assert PhoneNumber.get(PhoneNumber.display_number == "+628110000001").channel == "phone"


def test_a_number_moves_to_the_account_that_lists_it_once_the_other_is_unlinked(tenant, fake_graph):
    fake_graph.add_waba("7001", TOKEN, [number("1", "+62 811-000-0001")])
    fake_graph.add_waba("7002", "EAAG-second-token", [number("1", "+62 811-000-0001")])
    first = link(tenant).account
    second = link(tenant, waba_id="7002", token="EAAG-second-token")
    assert second.added == 0 and second.updated == 1  # same Meta id: the tenant's own number
    moved = PhoneNumber.get(PhoneNumber.whatsapp_phone_number_id == "1")
    assert moved.whatsapp_account_id == second.account.id
    assert account_service.numbers_of(first) == []


def test_another_tenants_meta_id_is_skipped(tenant, other_tenant, fake_graph):
    fake_graph.add_waba("7001", TOKEN, [number("1", "+62 811-000-0001")])
    fake_graph.add_waba("7002", "EAAG-second-token", [number("1", "+62 811-000-0009")])
    link(tenant)
    imported = link(other_tenant, waba_id="7002", token="EAAG-second-token")
    assert imported.skipped == [
        {"display_number": "+628110000009", "reason": "+628110000009 is another tenant's number."}
    ]


def test_the_same_id_listed_twice_is_imported_once(tenant, fake_graph):
    fake_graph.add_waba(
        "7001", TOKEN, [number("1", "+62 811-000-0001"), number("1", "+62 811-000-0001")]
    )
    imported = link(tenant)
    assert imported.added == 1 and len(imported.skipped) == 1


def test_meta_refusing_stores_nothing(tenant, fake_graph):
    fake_graph.add_waba("7001", TOKEN, [number("1", "+62 811-000-0001")])
    fake_graph.fail[TOKEN] = "auth"
    with pytest.raises(GraphError) as raised:
        link(tenant)
    assert raised.value.code == "whatsapp_auth_failed"
    assert WhatsAppAccount.select().count() == 0 and PhoneNumber.select().count() == 0


def test_linking_twice_is_a_conflict(tenant, other_tenant, fake_graph):
    fake_graph.add_waba("7001", TOKEN, [])
    link(tenant)
    with pytest.raises(Conflict):
        link(other_tenant)


def test_without_secrets_key_nothing_is_asked_of_meta(app, tenant, fake_graph):
    app.config["SECRETS_KEY"] = ""
    fake_graph.add_waba("7001", TOKEN, [])
    with pytest.raises(NotConfigured):
        link(tenant)
    assert fake_graph.requests == []


def test_a_sync_after_the_account_went_is_not_found(tenant, fake_graph):
    fake_graph.add_waba("7001", TOKEN, [number("1", "+62 811-000-0001")])
    account = link(tenant).account
    account_service.unlink(actor=ACTOR, tenant=tenant, account_id=account.id)
    with pytest.raises(account_service.NotFound):
        account_service.sync(actor=ACTOR, tenant=tenant, account_id=account.id)
