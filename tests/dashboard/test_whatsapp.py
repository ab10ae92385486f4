"""Dashboard WhatsApp: link an account (its numbers imported), sync, rotate the token, unlink,
Meta's refusals shown, and the secrets on no page."""

import pytest

from app.models import PhoneNumber, WhatsAppAccount
from tests.dashboard.audit import changes
from tests.dashboard.conftest import csrf_token, sign_in
from tests.fake_graph import number

PAGE = "/dashboard/settings/whatsapp"
WABA = "9401"
TOKEN = "EAAG-dashboard-link-token-4242"
APP_SECRET = "dashboard-app-secret-4242"
FORM = {"waba_id": WABA, "access_token": TOKEN, "app_secret": APP_SECRET, "label": "Jakarta"}


def text(response) -> str:
    return response.get_data(as_text=True)


@pytest.fixture
def waba(fake_graph):
    return fake_graph.add_waba(
        WABA, TOKEN, [number("9411", "+62 811-940-0001"), number("9412", "+62 811-940-0002")]
    )


@pytest.fixture
def linked(post, waba):
    response = post(PAGE, FORM)
    assert response.status_code == 302, text(response)
    return WhatsAppAccount.get()


def test_the_page_explains_the_fields_and_is_in_the_menu(signed_in):
    body = text(signed_in.get(PAGE))
    assert "<h1>WhatsApp Business accounts</h1>" in body
    assert "No WhatsApp Business account is linked yet." in body
    for label in ("WhatsApp Business account id", "Access token", "App secret"):
        assert f">{label}</label>" in body
    assert "whatsapp_business_management" in body and 'type="password"' in body
    assert f'href="{PAGE}">WhatsApp</a>' in text(signed_in.get("/dashboard/"))


def test_linking_imports_the_numbers_and_shows_them(signed_in, linked, fake_graph):
    page = text(signed_in.get(PAGE))
    assert "2 numbers added, 0 updated, 0 deactivated." in page
    assert "Jakarta" in page and "(WABA 9401)" in page and "Token …4242" in page
    assert "+628119400001" in page and "<td>GREEN</td>" in page
    assert fake_graph.tokens_seen() == [TOKEN]
    assert changes() == [
        (
            "whatsapp.linked",
            linked.id,
            {
                "wabaId": WABA,
                "added": 2,
                "updated": 0,
                "deactivated": 0,
                "skipped": 0,
            },
        )
    ]


def test_metas_refusal_is_shown_and_nothing_stored(signed_in, post, waba, fake_graph):
    fake_graph.fail[TOKEN] = "auth"
    response = post(PAGE, FORM)
    assert response.status_code == 422
    assert "Meta refused the access token" in text(response)
    assert WhatsAppAccount.select().count() == 0 and PhoneNumber.select().count() == 0


def test_an_invalid_form_is_422_naming_the_field(post, waba, fake_graph):
    response = post(PAGE, {**FORM, "waba_id": "abc"})
    assert response.status_code == 422
    assert "Enter the account&#39;s numeric id from Meta." in text(response)
    assert fake_graph.requests == []


def test_sync_rotate_and_unlink(signed_in, post, linked, waba, fake_graph):
    waba.numbers.pop()
    response = post(f"{PAGE}/{linked.id}/sync")
    assert response.status_code == 302
    page = text(signed_in.get(PAGE))
    assert "0 numbers added, 0 updated, 1 deactivated." in page
    assert "Inactive</span>" in page
    waba.token = "EAAG-rotated-dashboard-9999"
    response = post(f"{PAGE}/{linked.id}/token", {"access_token": "EAAG-rotated-dashboard-9999"})
    assert response.status_code == 302
    assert "is now …9999." in text(signed_in.get(PAGE))
    refused = post(f"{PAGE}/{linked.id}/token", {"access_token": "EAAG-refused-token-0000"})
    assert refused.status_code == 422 and "The token was not changed" in text(refused)
    confirm = signed_in.get(f"{PAGE}/{linked.id}/unlink")
    assert confirm.status_code == 200 and "Unlink WhatsApp Business account 9401?" in text(confirm)
    response = post(f"{PAGE}/{linked.id}/unlink", {}, token_from=f"{PAGE}/{linked.id}/unlink")
    assert response.status_code == 302
    assert WhatsAppAccount.select().count() == 0
    assert [action for action, _, _ in changes()][-3:] == [
        "whatsapp.synced",
        "whatsapp.updated",
        "whatsapp.unlinked",
    ]


def test_a_viewer_sees_the_accounts_and_no_forms(client, viewer, linked):
    client.get("/dashboard/sign-out")
    sign_in(client, viewer.email)
    page = text(client.get(PAGE))
    assert "+628119400001" in page
    assert "Link account</button>" not in page and "Rotate token" not in page
    response = client.post(
        f"{PAGE}/{linked.id}/sync", data={"csrf_token": csrf_token(client.get(PAGE))}
    )
    assert response.status_code == 403


def test_no_page_shows_a_secret(signed_in, post, linked, fake_graph):
    pages = [
        signed_in.get(PAGE),
        signed_in.get("/dashboard/phone-numbers"),
        signed_in.get("/dashboard/settings/audit-log"),
        signed_in.get(f"{PAGE}/{linked.id}/unlink"),
        post(f"{PAGE}/{linked.id}/sync"),
        post(PAGE, FORM),  # linked already: the form comes back, its secrets not filled in
    ]
    assert pages[-1].status_code == 409
    for page in pages:
        body = text(page)
        assert TOKEN not in body and APP_SECRET not in body
