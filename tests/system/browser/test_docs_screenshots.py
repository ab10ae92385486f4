"""The docs' screenshots, taken from the dashboard as it is.

Every run walks through each screenshot's page and checks it; the PNG under docs/ is written
only when asked, so an ordinary run changes no file:

    UPDATE_DOCS_SCREENSHOTS=1 .venv/bin/pytest tests/system/browser/test_docs_screenshots.py
"""

import os
import re
from pathlib import Path

import pytest
import requests
from playwright.sync_api import expect

from app.services import keys as key_service
from app.services import tenants as tenant_service
from app.services import users as user_service
from tests.dashboard.conftest import PASSWORD
from tests.helpers import ACTOR
from tests.system.browser.conftest import fill_sign_in, heading, menu, row

DOCS = Path(__file__).resolve().parents[3] / "docs"
UPDATE = os.environ.get("UPDATE_DOCS_SCREENSHOTS") == "1"
VIEWPORT = {"width": 1200, "height": 800}


@pytest.fixture
def demo():
    """A tenant as `make run` names it, with its owner."""
    tenant = tenant_service.create_tenant(actor=ACTOR, name="demo", plan="business")
    user_service.create_user(
        actor=ACTOR, tenant=tenant, email="owner@demo.test", password=PASSWORD, role="owner"
    )
    return tenant


def test_the_api_keys_screenshot(page, shot, demo, server):
    """Settings → API keys just after "Create key": the key shown once, above a list with a
    read-only key in use and a revoked one."""
    old, _ = key_service.create_key(actor=ACTOR, tenant=demo, name="legacy")
    key_service.revoke_key(actor=ACTOR, key_id=old.id)
    _, reports = key_service.create_key(
        actor=ACTOR, tenant=demo, name="reports", scope="read", expires_in_days=90
    )
    assert requests.get(f"{server}/api/v1/calls", headers={"x-api-key": reports}, timeout=5).ok

    page.set_viewport_size(VIEWPORT)
    page.goto("/dashboard/sign-in")
    shot("sign-in")
    fill_sign_in(page, "owner@demo.test")
    expect(heading(page)).to_have_text("Overview")
    shot("overview")
    menu(page).get_by_role("link", name="API keys").click()
    expect(heading(page)).to_have_text("API keys")
    shot("api-keys")
    page.get_by_label("Name").fill("production")
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_label("New API key")).to_have_value(re.compile(r"^dkl_\w{40}$"))
    expect(row(page, "legacy")).to_contain_text("Revoked")
    expect(row(page, "reports")).to_contain_text("Read only")
    expect(row(page, "production")).to_contain_text("Active")
    shot("created")
    if UPDATE:
        # The top of the page, down to the list's end (the Create key form below is left out).
        form = page.get_by_role("heading", name="Create key").bounding_box()
        assert form is not None
        clip = {"x": 0, "y": 0, "width": VIEWPORT["width"], "height": round(form["y"]) - 12}
        DOCS.mkdir(exist_ok=True)
        page.screenshot(path=DOCS / "dashboard-api-keys.png", clip=clip)
