"""Settings → API keys in a real browser: a key created here works in the API at once, is
shown once, and is refused from the request after its revocation; viewers only read."""

import re
from datetime import timedelta

import requests
from playwright.sync_api import Page, expect

from app.services import keys as key_service
from app.util import utcnow
from tests.helpers import ACTOR
from tests.system.browser.conftest import heading, menu, row

AGENT = {"name": "Reception", "systemPrompt": "Be helpful."}


def open_api_keys(page: Page, shot) -> None:
    """From any dashboard page, follow the menu to Settings → API keys."""
    menu(page).get_by_role("link", name="API keys").click()
    expect(heading(page)).to_have_text("API keys")
    shot("api-keys")


def create_key(page: Page, shot, name: str, scope: str, expires: str) -> str:
    """Fill in and send Create key; the new key, read from the page that follows."""
    page.get_by_label("Name").fill(name)
    page.get_by_label("Scope").select_option(label=scope)
    page.get_by_label("Expires").select_option(label=expires)
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_role("heading", name=f"Your new key {name}")).to_be_visible()
    shot(f"created-{name}")
    key = page.get_by_label("New API key").input_value()
    assert re.fullmatch(r"dkl_[A-Za-z0-9]{40}", key), key
    return key


def agents(server: str, key: str, method: str = "GET") -> requests.Response:
    return requests.request(
        method,
        f"{server}/api/v1/agents",
        headers={"x-api-key": key},
        json=AGENT if method == "POST" else None,
        timeout=5,
    )


def test_a_key_created_here_works_until_it_is_revoked(page, shot, signed_in, server):
    signed_in("owner")
    open_api_keys(page, shot)
    key = create_key(page, shot, "production", "Full access", "Never")
    expect(page.get_by_role("button", name="Copy")).to_be_visible()
    listed = row(page, "production")
    expect(listed).to_contain_text(key[:12])
    expect(listed).to_contain_text("Full access")
    expect(listed).to_contain_text("Active")
    assert agents(server, key).status_code == 200

    listed.get_by_role("button", name="Revoke").click()
    expect(heading(page)).to_have_text("Revoke key production?")
    shot("revoke-production")
    assert agents(server, key).status_code == 200, "asking is not revoking"
    page.get_by_role("button", name="Revoke").click()
    expect(page.get_by_role("status")).to_have_text(f"The key production ({key[:12]}…) is revoked.")
    expect(heading(page)).to_have_text("API keys")
    expect(row(page, "production")).to_contain_text("Revoked")
    expect(row(page, "production").get_by_role("button", name="Revoke")).to_have_count(0)
    shot("revoked")
    refused = agents(server, key)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"


def test_a_read_only_key_with_an_expiry_may_only_read(page, shot, signed_in, server):
    signed_in("owner")
    open_api_keys(page, shot)
    before = utcnow() + timedelta(days=30)
    key = create_key(page, shot, "reports", "Read only", "In 30 days")
    after = utcnow() + timedelta(days=30)
    listed = row(page, "reports")
    expect(listed).to_contain_text("Read only")
    # The Expires column: 30 days from now (UTC), as the page shows times.
    days = {f"{moment:%Y-%m-%d}" for moment in (before, after)}
    expect(listed).to_contain_text(re.compile("|".join(days)))
    assert agents(server, key).status_code == 200
    refused = agents(server, key, "POST")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "insufficient_scope"


def test_the_key_is_shown_once_only(page, shot, signed_in):
    signed_in("owner")
    open_api_keys(page, shot)
    key = create_key(page, shot, "production", "Full access", "Never")
    open_api_keys(page, shot)
    expect(row(page, "production")).to_contain_text(key[:12])
    expect(page.get_by_label("New API key")).to_have_count(0)
    assert key not in page.content()


def test_reloading_the_page_that_shows_the_key_creates_no_second_key(page, shot, signed_in, tenant):
    signed_in("owner")
    open_api_keys(page, shot)
    key = create_key(page, shot, "production", "Full access", "Never")
    page.reload()  # the browser sends the same form again
    expect(page.get_by_role("status")).to_contain_text("This form was sent already")
    shot("reloaded")
    expect(page.get_by_label("New API key")).to_have_count(0)
    assert key not in page.content()
    assert [k.name for k in key_service.list_keys(tenant=tenant)] == ["production"]


def test_a_viewer_sees_the_keys_but_neither_creates_nor_revokes(page, shot, signed_in, tenant):
    key_service.create_key(actor=ACTOR, tenant=tenant, name="production")
    signed_in("viewer")
    open_api_keys(page, shot)
    expect(row(page, "production")).to_contain_text("Active")
    expect(page.get_by_role("button", name="Revoke")).to_have_count(0)
    expect(page.get_by_role("link", name="Revoke")).to_have_count(0)
    expect(page.get_by_role("button", name="Create key")).to_have_count(0)
    expect(page.get_by_label("Name")).to_have_count(0)
