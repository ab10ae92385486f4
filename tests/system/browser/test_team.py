"""Settings → Team and Audit log in a real browser: an owner adds a viewer, who signs in in a
browser of their own and only reads; the owner's audit log shows what was done."""

from playwright.sync_api import expect

from tests.dashboard.conftest import PASSWORD
from tests.system.browser.conftest import fill_sign_in, heading, menu, row

VIEWER = "reader@acme.test"


def test_an_owner_adds_a_viewer_who_only_reads_and_the_audit_log_shows_it(
    page, shot, signed_in, open_page
):
    owner = signed_in("owner")
    menu(page).get_by_role("link", name="API keys").click()
    expect(heading(page)).to_have_text("API keys")
    shot("api-keys")
    page.get_by_label("Name").fill("production")
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_label("New API key")).to_be_visible()
    shot("key-created")

    menu(page).get_by_role("link", name="Team").click()
    expect(heading(page)).to_have_text("Team")
    shot("team")
    page.get_by_label("Email").fill(VIEWER)
    page.get_by_label("Role", exact=True).select_option(label="Viewer (reads only)")
    page.get_by_label("Initial password").fill(PASSWORD)
    page.get_by_role("button", name="Add user").click()
    expect(page.get_by_role("status")).to_have_text(f"{VIEWER} can now sign in as viewer.")
    expect(row(page, VIEWER)).to_contain_text("Active")
    shot("viewer-added")

    # The viewer, in a browser of their own.
    viewer = open_page()
    viewer.goto("/dashboard/sign-in")
    shot("viewer-sign-in", on=viewer)
    fill_sign_in(viewer, VIEWER)
    expect(heading(viewer)).to_have_text("Overview")
    expect(viewer.get_by_text(f"{VIEWER} (viewer, acme)")).to_be_visible()
    expect(menu(viewer).get_by_role("link", name="Team")).to_have_count(0)
    expect(menu(viewer).get_by_role("link", name="Audit log")).to_have_count(0)
    shot("viewer-overview", on=viewer)
    menu(viewer).get_by_role("link", name="API keys").click()
    expect(heading(viewer)).to_have_text("API keys")
    expect(row(viewer, "production")).to_contain_text("Active")
    expect(viewer.get_by_role("button", name="Revoke")).to_have_count(0)
    expect(viewer.get_by_role("button", name="Create key")).to_have_count(0)
    shot("viewer-api-keys", on=viewer)

    menu(page).get_by_role("link", name="Audit log").click()
    expect(heading(page)).to_have_text("Audit log")
    added = row(page, "user.created")
    expect(added).to_contain_text(owner.email)
    expect(added).to_contain_text(f"email: {VIEWER}, role: viewer")
    created = row(page, "key.created")
    expect(created).to_contain_text(owner.email)
    expect(created).to_contain_text("name: production, scope: full")
    expect(row(page, "user.signed_in")).to_contain_text(VIEWER)
    shot("audit-log")
