"""Signing in and out in a real browser, the session and CSRF, and the Overview's figures."""

import re

import requests
from playwright.sync_api import Page, expect

from tests.call_flow import CALLER, RUNTIME, backdate, end_body
from tests.system.browser.conftest import fill_sign_in, heading, menu

OVERVIEW = re.compile(r"/dashboard/$")
SIGN_IN = re.compile(r"/dashboard/sign-in")


def figure(page: Page, name: str):
    """The value the Overview shows under the figure's name."""
    return (
        page.locator(".figures > div")
        .filter(has=page.get_by_role("term").filter(has_text=name))
        .get_by_role("definition")
    )


def test_signing_in_from_a_dashboard_link_opens_that_page(page, shot, user):
    owner = user("owner")
    page.goto("/dashboard/")
    expect(page).to_have_url(SIGN_IN)
    expect(heading(page)).to_have_text("Sign in")
    shot("sign-in")
    fill_sign_in(page, owner.email)
    expect(heading(page)).to_have_text("Overview")
    expect(page).to_have_url(OVERVIEW)
    expect(page.get_by_text("owner@acme.test (owner, acme)")).to_be_visible()
    shot("overview")


def test_a_wrong_password_shows_one_message_and_stays_on_sign_in(page, shot, user):
    owner = user("owner")
    page.goto("/dashboard/sign-in")
    shot("sign-in")
    fill_sign_in(page, owner.email, "not the password")
    expect(page.get_by_role("alert")).to_have_text("Wrong email or password.")
    expect(heading(page)).to_have_text("Sign in")
    expect(page.get_by_label("Email")).to_have_value(owner.email)
    shot("wrong-password")
    page.goto("/dashboard/")
    expect(heading(page)).to_have_text("Sign in")
    shot("still-signed-out")


def test_five_failed_sign_ins_stop_even_the_right_password(page, shot, user):
    owner = user("owner")
    page.goto("/dashboard/sign-in")
    shot("sign-in")
    for attempt in range(1, 6):
        fill_sign_in(page, owner.email, f"wrong password {attempt}")
        # The page that follows has the password field empty again: the answer has come.
        expect(page.get_by_label("Password")).to_have_value("")
        expect(page.get_by_role("alert")).to_have_text("Wrong email or password.")
        shot(f"failure-{attempt}")
    with page.expect_response(SIGN_IN) as answer:
        fill_sign_in(page, owner.email)
    assert answer.value.status == 429
    expect(page.get_by_role("alert")).to_have_text(
        "Too many failed sign-ins. Wait 15 minutes, then try again."
    )
    expect(heading(page)).to_have_text("Sign in")
    shot("throttled")
    page.goto("/dashboard/")
    expect(page).to_have_url(SIGN_IN)
    expect(heading(page)).to_have_text("Sign in")
    shot("still-signed-out")


def test_the_sign_in_form_without_its_csrf_token_is_refused(page, shot, user):
    owner = user("owner")
    page.goto("/dashboard/sign-in")
    shot("sign-in")
    page.locator("form input[name=csrf_token]").evaluate("input => input.remove()")
    fill_sign_in(page, owner.email)
    expect(heading(page)).to_have_text("Bad request")
    expect(page.get_by_text("This form has expired")).to_be_visible()
    shot("refused")
    page.goto("/dashboard/")
    expect(heading(page)).to_have_text("Sign in")
    shot("still-signed-out")


def test_a_change_without_the_csrf_token_is_refused_and_the_session_stays(page, shot, signed_in):
    signed_in("owner")
    page.locator("header form input[name=csrf_token]").evaluate("input => input.remove()")
    page.get_by_role("button", name="Sign out").click()
    expect(heading(page)).to_have_text("Bad request")
    shot("refused")
    page.get_by_role("link", name="Back to the overview").click()
    expect(heading(page)).to_have_text("Overview")
    shot("still-signed-in")


def test_sign_out_ends_the_session(page, shot, signed_in):
    signed_in("viewer")
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("status")).to_have_text("You have signed out.")
    expect(heading(page)).to_have_text("Sign in")
    shot("signed-out")
    page.goto("/dashboard/")
    expect(page).to_have_url(SIGN_IN)
    expect(heading(page)).to_have_text("Sign in")
    shot("overview-asks-to-sign-in")


def test_a_call_shows_on_the_overview_figures(page, shot, signed_in, server, did, runtime_headers):
    def runtime(path, **body):
        response = requests.post(
            f"{server}{RUNTIME}{path}", json=body, headers=runtime_headers, timeout=5
        )
        assert response.ok, response.text
        return response.json()

    signed_in("owner")
    expect(figure(page, "Balance")).to_have_text("100 min")
    expect(figure(page, "Reserved")).to_have_text("0 min")
    call = runtime("", did=did, callerNumber=CALLER)
    runtime(f"/{call['id']}/answered")
    page.reload()
    # The agent's 10-minute limit is held while the call lasts.
    expect(figure(page, "Reserved")).to_have_text("10 min")
    expect(figure(page, "Available")).to_have_text("90 min")
    shot("call-in-progress")
    backdate(call["id"], 95)  # it lived as long as its end reports
    runtime(f"/{call['id']}/ended", **end_body(durationSeconds=95))
    page.reload()
    expect(figure(page, "Balance")).to_have_text("98 min")
    expect(figure(page, "Reserved")).to_have_text("0 min")
    expect(figure(page, "Available")).to_have_text("98 min")
    shot("call-ended")


def test_the_menu_fits_on_one_line_at_1280_and_wraps_inside_a_narrow_screen(page, shot, signed_in):
    signed_in("owner")
    links = menu(page).get_by_role("link")
    expect(links).to_have_count(13)
    boxes = [links.nth(index).bounding_box() for index in range(links.count())]
    assert len({round(box["y"]) for box in boxes if box}) == 1, boxes
    header = page.locator("header.top").bounding_box()
    sign_out = page.get_by_role("button", name="Sign out").bounding_box()
    assert header and sign_out and header["height"] < 60, header
    assert sign_out["y"] < header["y"] + header["height"], (sign_out, header)
    page.set_viewport_size({"width": 390, "height": 800})
    shot("overview-narrow")
    for index in range(links.count()):
        box = links.nth(index).bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, (index, box)
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    links.filter(has_text="Audit log").click()
    expect(heading(page)).to_have_text("Audit log")
    shot("audit-log-narrow")
