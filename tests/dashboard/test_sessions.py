"""Signing in and out, sessions, CSRF and roles."""

from datetime import timedelta

import pytest

from app.db import database
from app.models import ApiKey, Tenant, UserSession
from app.services import audit
from app.services import users as user_service
from app.util import utcnow
from tests.dashboard.conftest import PASSWORD, csrf_token, sign_in
from tests.helpers import ACTOR


def test_pages_need_a_signed_in_user(client):
    response = client.get("/dashboard/")
    assert response.status_code == 302
    assert response.headers["Location"] == "/dashboard/sign-in?next=/dashboard/"


def test_sign_in_opens_the_overview_and_sign_out_ends_the_session(client, owner):
    response = sign_in(client, "Owner@Acme.test")
    assert response.status_code == 302 and response.headers["Location"] == "/dashboard/"
    page = client.get("/dashboard/")
    assert page.status_code == 200
    assert "<h1>Overview</h1>" in page.get_data(True)
    assert "owner@acme.test" in page.get_data(True)
    out = client.post("/dashboard/sign-out", data={"csrf_token": csrf_token(page)})
    assert out.status_code == 302
    assert client.get("/dashboard/").status_code == 302


@pytest.mark.parametrize("email", ["owner@acme.test", "nobody@acme.test"])
def test_a_wrong_password_or_email_gets_one_message(client, owner, email):
    response = sign_in(client, email, password="wrong password!")
    assert response.status_code == 401
    assert "Wrong email or password." in response.get_data(True)
    assert client.get("/dashboard/").status_code == 302


def test_the_session_cookie_is_httponly_lax_and_secure_by_default(app, client, owner):
    app.config["SESSION_COOKIE_SECURE"] = True
    response = sign_in(client, owner.email)
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Secure" in cookie


@pytest.mark.parametrize(
    "target",
    [
        "//evil.test/x",
        "/dashboard/%0A",
        "/dashboard/%0D%0ASet-Cookie:%20x=1",
        "/dashboard//evil.test",
        "/dashboard\\evil.test",
        "https://evil.test/dashboard",
        "/dashboardx",
    ],
)
def test_the_next_page_must_be_a_plain_dashboard_path(client, owner, target):
    page = client.get(f"/dashboard/sign-in?next={target}")
    assert page.status_code == 200
    response = client.post(
        f"/dashboard/sign-in?next={target}",
        data={"email": owner.email, "password": PASSWORD, "csrf_token": csrf_token(page)},
    )
    assert response.status_code == 302 and response.headers["Location"] == "/dashboard/"


def test_the_next_page_keeps_a_plain_dashboard_path_and_query(client, owner):
    target = "/dashboard/calls?status=ended%26limit=5"
    page = client.get(f"/dashboard/sign-in?next={target}")
    response = client.post(
        f"/dashboard/sign-in?next={target}",
        data={"email": owner.email, "password": PASSWORD, "csrf_token": csrf_token(page)},
    )
    assert response.headers["Location"] == "/dashboard/calls?status=ended&limit=5"


def test_a_session_cookie_copied_before_sign_out_is_refused_after_it(app, client, owner):
    """Sign out ends the session on the server: the probe's copied cookie, replayed from
    another client after "Sign out", opened the dashboard and created a full-access key."""
    sign_in(client, owner.email)
    page = client.get("/dashboard/settings/api-keys")
    assert page.status_code == 200
    copied = client.get_cookie("session").value
    client.post("/dashboard/sign-out", data={"csrf_token": csrf_token(page)})
    thief = app.test_client()
    thief.set_cookie("session", copied)
    assert thief.get("/dashboard/").status_code == 302
    response = thief.post(
        "/dashboard/settings/api-keys",
        data={"name": "stolen", "scope": "full", "expiry": "never", "csrf_token": csrf_token(page)},
    )
    assert response.status_code in (302, 400)
    assert ApiKey.select().where(ApiKey.name == "stolen").count() == 0
    # Other sessions of the same user go on: only the one signed out ended.
    other = app.test_client()
    sign_in(other, owner.email)
    again = app.test_client()
    sign_in(again, owner.email)
    again.post("/dashboard/sign-out", data={"csrf_token": csrf_token(again.get("/dashboard/"))})
    assert other.get("/dashboard/").status_code == 200


def test_every_dashboard_page_refuses_framing_and_sniffing(signed_in, client):
    for response in (signed_in.get("/dashboard/"), client.get("/dashboard/sign-in")):
        headers = response.headers
        assert headers["X-Frame-Options"] == "DENY"
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Referrer-Policy"] == "same-origin"
        policy = headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy


def test_a_form_posted_without_its_token_is_refused(client, owner):
    page = client.get("/dashboard/sign-in")
    assert page.status_code == 200
    response = client.post("/dashboard/sign-in", data={"email": owner.email, "password": PASSWORD})
    assert response.status_code == 400
    assert "This form has expired" in response.get_data(True)
    assert client.get("/dashboard/").status_code == 302


def test_a_changed_password_ends_other_sessions(client, owner):
    sign_in(client, owner.email)
    assert client.get("/dashboard/").status_code == 200
    user_service.set_password(actor=ACTOR, user=owner, password="another long password")
    assert client.get("/dashboard/").status_code == 302


def test_a_disabled_user_is_signed_out_and_cannot_sign_in(client, owner):
    sign_in(client, owner.email)
    user_service.disable(actor=ACTOR, user=owner)
    assert client.get("/dashboard/").status_code == 302
    assert sign_in(client, owner.email).status_code == 401


def test_a_viewer_reads_and_signs_out(client, viewer):
    sign_in(client, viewer.email)
    page = client.get("/dashboard/")
    assert page.status_code == 200
    response = client.post("/dashboard/sign-out", data={"csrf_token": csrf_token(page)})
    assert response.status_code == 302


def test_the_dashboard_is_off_without_a_secret_key(app, client):
    app.config["SECRET_KEY"] = "change-me"
    response = client.get("/dashboard/sign-in")
    assert response.status_code == 503
    assert "SECRET_KEY" in response.get_data(True)


def test_an_unknown_dashboard_page_is_an_html_404(signed_in):
    response = signed_in.get("/dashboard/agents/agent_nope/nothing")
    assert response.status_code == 404
    assert response.content_type.startswith("text/html")


def test_users_cli_creates_lists_sets_passwords_and_disables(runner, tenant, client):
    created = runner.invoke(
        args=[
            "users",
            "create",
            "--tenant",
            "acme",
            "--email",
            "Ann@Acme.test",
            "--role",
            "admin",
            "--password-stdin",
        ],
        input="a long enough password\n",
    )
    assert created.exit_code == 0, created.output
    assert "Created admin ann@acme.test" in created.output
    assert sign_in(client, "ann@acme.test", "a long enough password").status_code == 302
    listed = runner.invoke(args=["users", "list", "--tenant", "acme"])
    assert "ann@acme.test  admin" in listed.output and "password" not in listed.output
    again = runner.invoke(
        args=[
            "users",
            "create",
            "--tenant",
            "acme",
            "--email",
            "ann@acme.test",
            "--password-stdin",
        ],
        input="a long enough password\n",
    )
    assert again.exit_code == 1 and "exists already" in again.output
    short = runner.invoke(
        args=["users", "create", "--tenant", "acme", "--email", "bo@acme.test", "--password-stdin"],
        input="short\n",
    )
    assert short.exit_code == 1 and "10 to 1024 characters" in short.output
    changed = runner.invoke(
        args=["users", "set-password", "--email", "ann@acme.test", "--password-stdin"],
        input="another long password\n",
    )
    assert changed.exit_code == 0
    assert client.get("/dashboard/").status_code == 302  # that session ended
    assert sign_in(client, "ann@acme.test", "another long password").status_code == 302
    disabled = runner.invoke(args=["users", "disable", "--email", "ann@acme.test"])
    assert "Disabled ann@acme.test" in disabled.output
    assert (
        "already disabled"
        in runner.invoke(args=["users", "disable", "--email", "ann@acme.test"]).output
    )
    assert sign_in(client, "ann@acme.test", "another long password").status_code == 401
    entries = audit.list_entries(tenant=tenant, limit=20, offset=0).items
    cli = [(entry.action, entry.actor_label) for entry in entries if entry.actor_type == "cli"]
    assert cli == [
        ("user.disabled", "CLI"),
        ("user.password_set", "CLI"),
        ("user.created", "CLI"),
    ]


def test_demo_prints_an_owner_who_can_sign_in(runner, client):
    result = runner.invoke(args=["demo"])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("Dashboard:"))
    email, password = line.split()[4], line.split()[-1]
    assert email == "owner@demo.test"
    assert sign_in(client, email, password).status_code == 302
    again = runner.invoke(args=["demo"]).output
    assert password not in again  # a new password each time, like the key


def test_sign_ins_are_in_the_audit_log(client, owner):
    sign_in(client, owner.email, password="wrong password!")
    sign_in(client, owner.email)
    page = audit.list_entries(tenant=owner.tenant, limit=2, offset=0)
    assert [(entry.action, entry.target_id) for entry in page.items] == [
        ("user.signed_in", owner.id),
        ("user.sign_in_failed", owner.id),
    ]
    assert all(entry.address == "127.0.0.1" for entry in page.items)


@pytest.mark.parametrize("email", ["owner@acme.test", "nobody@acme.test"])
def test_sign_in_is_throttled_after_five_failures_alike_for_any_email(client, owner, email):
    for _ in range(5):
        assert sign_in(client, email, password="wrong password!").status_code == 401
    # Now even the right password waits, and the message says nothing of the account.
    refused = sign_in(client, email, password=PASSWORD)
    assert refused.status_code == 429
    assert "Too many failed sign-ins" in refused.get_data(True)


def test_the_throttle_counts_failures_per_address_too(client, owner, viewer):
    for number in range(5):
        sign_in(client, f"guess{number}@acme.test", password="wrong password!")
    assert sign_in(client, viewer.email).status_code == 429


@pytest.mark.parametrize(("proxies", "address"), [(0, "127.0.0.1"), (1, "10.9.8.7")])
def test_the_client_address_is_the_proxys_unless_proxies_are_trusted(app_config, proxies, address):
    from app import create_app
    from tests.dashboard.conftest import PerRequestContextClient

    app = create_app({**app_config, "TRUSTED_PROXIES": proxies})
    app.test_client_class = PerRequestContextClient
    client = app.test_client()
    with app.app_context():
        page = client.get("/dashboard/sign-in")
        client.post(
            "/dashboard/sign-in",
            data={"email": "x@acme.test", "password": "wrong", "csrf_token": csrf_token(page)},
            headers={"X-Forwarded-For": "10.9.8.7"},
        )
        [entry] = audit.AuditEntry.select()
        assert entry.address == address


def test_a_session_ends_a_week_after_sign_in_and_is_pruned(runner, client, owner):
    sign_in(client, owner.email)
    assert client.get("/dashboard/").status_code == 200
    UserSession.update(created_at=utcnow() - timedelta(days=7, seconds=1)).execute()
    assert client.get("/dashboard/").status_code == 302
    result = runner.invoke(args=["maintenance", "prune"])
    assert "Deleted 1 dashboard sessions older than a week." in result.output
    assert UserSession.select().count() == 0


def test_a_write_refused_by_a_unique_index_is_a_conflict_page(app, client, tenant, owner):
    def duplicate():
        with database.atomic():
            Tenant.create(id="ten_twin", name=tenant.name)

    # An endpoint of the dashboard's blueprint, so that its handlers answer.
    app.add_url_rule("/dashboard/duplicate", "dashboard.duplicate", duplicate)
    sign_in(client, owner.email)
    response = client.get("/dashboard/duplicate")
    assert response.status_code == 409 and response.content_type.startswith("text/html")
    assert "A record with the same unique value exists already." in response.get_data(True)
