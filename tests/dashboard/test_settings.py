"""Settings: API keys (created and shown once, revoked), Team and the Audit log."""

import re
from datetime import timedelta

import pytest

from app.models import ApiKey
from app.services import audit
from app.services import keys as key_service
from app.services import users as user_service
from app.util import utcnow
from tests.dashboard.conftest import PASSWORD, csrf_token, sign_in
from tests.helpers import ACTOR

KEYS = "/dashboard/settings/api-keys"


def create_key(post, **fields):
    data = {"name": "production", "scope": "full", "expires": "", **fields}
    return post(KEYS, data, token_from=KEYS)


def shown_key(response) -> str:
    match = re.search(r'id="new-key-value"[^>]*value="(dkl_[A-Za-z0-9]+)"', response.get_data(True))
    assert match, "the new key is not on the page"
    return match.group(1)


def new_key(signed_in, post, **fields) -> str:
    """Create a key through the form; the key, as its answer shows it once."""
    created = create_key(post, **fields)
    assert created.status_code == 201
    assert created.headers["Cache-Control"] == "no-store"
    return shown_key(created)


def test_a_key_created_here_is_shown_once_and_works_in_the_api(signed_in, post):
    key = new_key(signed_in, post)
    assert signed_in.get("/api/v1/agents", headers={"x-api-key": key}).status_code == 200
    again = signed_in.get(KEYS).get_data(True)
    assert key not in again and "production" in again and key[:12] in again
    assert ApiKey.select().count() == 1


def test_a_read_key_with_an_expiry(signed_in, post, tenant):
    key = new_key(signed_in, post, name="reports", scope="read", expires="90")
    record = ApiKey.get(ApiKey.name == "reports")
    assert record.scope == "read"
    assert abs(record.expires_at - (utcnow() + timedelta(days=90))) < timedelta(minutes=1)
    api = {"x-api-key": key}
    assert signed_in.get("/api/v1/agents", headers=api).status_code == 200
    refused = signed_in.post("/api/v1/agents", json={"name": "x", "systemPrompt": "y"}, headers=api)
    assert refused.status_code == 403 and refused.json["error"]["code"] == "insufficient_scope"
    page = signed_in.get(KEYS).get_data(True)
    assert "Read only" in page


@pytest.mark.parametrize(
    "fields", [{"name": ""}, {"scope": "root"}, {"expires": "7"}, {"name": "x" * 101}]
)
def test_bad_key_forms_are_refused_with_a_message(signed_in, post, fields):
    response = create_key(post, **fields)
    assert response.status_code == 422
    assert "new-key-value" not in response.get_data(True)
    assert ApiKey.select().count() == 0


def test_revoking_asks_first_then_the_key_is_refused_at_once(signed_in, post, tenant):
    key = new_key(signed_in, post)
    record = ApiKey.get(ApiKey.name == "production")
    confirm = signed_in.get(f"{KEYS}/{record.id}/revoke")
    assert confirm.status_code == 200 and "Revoke key production?" in confirm.get_data(True)
    assert signed_in.get("/api/v1/agents", headers={"x-api-key": key}).status_code == 200
    done = post(f"{KEYS}/{record.id}/revoke", token_from=f"{KEYS}/{record.id}/revoke")
    assert done.status_code == 302
    assert signed_in.get("/api/v1/agents", headers={"x-api-key": key}).status_code == 401
    actions = [entry.action for entry in audit.list_entries(tenant=tenant, limit=9, offset=0).items]
    assert actions[:2] == ["key.revoked", "key.created"]


def test_another_tenants_key_is_404(signed_in, post, other_tenant):
    record, _ = key_service.create_key(actor=ACTOR, tenant=other_tenant, name="theirs")
    assert signed_in.get(f"{KEYS}/{record.id}/revoke").status_code == 404
    assert post(f"{KEYS}/{record.id}/revoke").status_code == 404
    assert ApiKey.get_by_id(record.id).revoked_at is None


def test_a_viewer_sees_keys_without_revoke_and_cannot_create(client, viewer, tenant):
    key_service.create_key(actor=ACTOR, tenant=tenant, name="production")
    sign_in(client, viewer.email)
    page = client.get(KEYS)
    text = page.get_data(True)
    assert page.status_code == 200 and "production" in text
    assert "Revoke" not in text and "Create key" not in text
    token = csrf_token(page)
    refused = client.post(
        KEYS, data={"name": "x", "scope": "full", "expires": "", "csrf_token": token}
    )
    assert refused.status_code == 403
    record = ApiKey.get()
    assert client.post(f"{KEYS}/{record.id}/revoke", data={"csrf_token": token}).status_code == 403
    assert ApiKey.get().revoked_at is None


def test_a_key_form_without_its_token_is_refused(signed_in):
    response = signed_in.post(KEYS, data={"name": "x", "scope": "full", "expires": ""})
    assert response.status_code == 400
    assert ApiKey.select().count() == 0


def test_the_team_page_adds_users_changes_roles_and_disables(signed_in, post, client, tenant):
    added = post(
        "/dashboard/settings/team",
        {"email": "Bea@Acme.test", "role": "viewer", "password": PASSWORD},
        token_from="/dashboard/settings/team",
    )
    assert added.status_code == 302
    bea = user_service.find_user("bea@acme.test")
    assert bea.role == "viewer" and bea.tenant_id == tenant.id
    changed = post(f"/dashboard/settings/team/{bea.id}/role", {"role": "admin"})
    assert changed.status_code == 302 and user_service.find_user("bea@acme.test").role == "admin"
    confirm = signed_in.get(f"/dashboard/settings/team/{bea.id}/disable")
    assert "Disable bea@acme.test?" in confirm.get_data(True)
    assert post(f"/dashboard/settings/team/{bea.id}/disable").status_code == 302
    assert user_service.find_user("bea@acme.test").disabled_at is not None
    log = signed_in.get("/dashboard/settings/audit-log").get_data(True)
    for action in ("user.created", "user.role_changed", "user.disabled", "user.signed_in"):
        assert action in log


def test_an_owner_cannot_disable_or_demote_themselves(signed_in, post, owner):
    assert post(f"/dashboard/settings/team/{owner.id}/disable").status_code == 409
    assert post(f"/dashboard/settings/team/{owner.id}/role", {"role": "viewer"}).status_code == 409
    assert user_service.find_user(owner.email).role == "owner"


def test_a_duplicate_or_short_user_is_refused_with_a_message(signed_in, post, owner):
    taken = post(
        "/dashboard/settings/team", {"email": owner.email, "role": "viewer", "password": PASSWORD}
    )
    assert taken.status_code == 409
    short = post(
        "/dashboard/settings/team", {"email": "c@acme.test", "role": "viewer", "password": "short"}
    )
    assert short.status_code == 422


@pytest.mark.parametrize("role", ["admin", "viewer"])
def test_team_and_audit_log_are_for_owners(client, tenant, role):
    user_service.create_user(
        actor=ACTOR, tenant=tenant, email=f"{role}@acme.test", password=PASSWORD, role=role
    )
    sign_in(client, f"{role}@acme.test")
    assert client.get("/dashboard/settings/team").status_code == 403
    assert client.get("/dashboard/settings/audit-log").status_code == 403
    menu = client.get("/dashboard/").get_data(True)
    assert "Audit log" not in menu and "API keys" in menu


def test_another_tenants_user_is_404(signed_in, post, other_tenant):
    theirs = user_service.create_user(
        actor=ACTOR, tenant=other_tenant, email="x@globex.test", password=PASSWORD, role="viewer"
    )
    assert signed_in.get(f"/dashboard/settings/team/{theirs.id}/disable").status_code == 404
    assert post(f"/dashboard/settings/team/{theirs.id}/role", {"role": "owner"}).status_code == 404


def test_the_audit_log_shows_cli_and_dashboard_changes_and_pages(signed_in, runner, tenant):
    runner.invoke(args=["keys", "create", "--tenant", "acme", "--name", "from-cli"])
    page = signed_in.get("/dashboard/settings/audit-log").get_data(True)
    assert "key.created" in page and "command line" in page and "owner@acme.test" in page
    assert signed_in.get("/dashboard/settings/audit-log?offset=-1").status_code == 422
    assert signed_in.get("/dashboard/settings/audit-log?offset=" + "9" * 5000).status_code == 422


def test_the_audit_log_shows_api_changes_with_their_key(signed_in, headers, api_key):
    created = signed_in.post(
        "/api/v1/agents", json={"name": "From the API", "systemPrompt": "Hi."}, headers=headers
    )
    page = signed_in.get("/dashboard/settings/audit-log").get_data(True)
    row = next(row for row in page.split("<tr>") if "agent.created" in row)
    assert f'test ({api_key[:12]}…) <span class="muted">(API key)</span>' in row
    assert created.get_json()["id"] in row and "127.0.0.1" in row


def test_the_audit_log_links_each_target_to_its_page_and_filters_as_the_api(
    signed_in, headers, api_key
):
    agent_id = signed_in.post(
        "/api/v1/agents", json={"name": "Linked", "systemPrompt": "Hi."}, headers=headers
    ).get_json()["id"]
    page = signed_in.get("/dashboard/settings/audit-log").get_data(True)
    assert f'<a href="/dashboard/agents/{agent_id}"><code>{agent_id}</code></a>' in page
    filtered = signed_in.get("/dashboard/settings/audit-log?action=agent.created&actorType=api_key")
    text = filtered.get_data(True)
    assert filtered.status_code == 200 and agent_id in text and "user.signed_in</code>" not in text
    assert 'value="agent.created"' in text and '<option value="api_key" selected>' in text
    dashboard = signed_in.get("/dashboard/settings/audit-log?actorType=user").get_data(True)
    assert "user.signed_in" in dashboard and "agent.created</code>" not in dashboard
    later = (utcnow() + timedelta(days=1)).date().isoformat()
    assert "No entry matches these filters." in signed_in.get(
        f"/dashboard/settings/audit-log?since={later}"
    ).get_data(True)
    assert signed_in.get("/dashboard/settings/audit-log?action=Nope").status_code == 422
    signed_in.delete(f"/api/v1/agents/{agent_id}", headers=headers)
    page = signed_in.get("/dashboard/settings/audit-log").get_data(True)
    assert f'href="/dashboard/agents/{agent_id}"' not in page


def test_a_nul_in_any_settings_or_sign_in_field_is_refused_not_a_500(client, owner, post):
    page = client.get("/dashboard/sign-in")
    response = client.post(
        "/dashboard/sign-in",
        data={"email": "owner\x00@acme.test", "password": PASSWORD, "csrf_token": csrf_token(page)},
    )
    assert response.status_code == 400
    sign_in(client, owner.email)
    assert create_key(post, name="pro\x00duction").status_code == 422
    team = "/dashboard/settings/team"
    added = post(team, {"email": "a\x00@acme.test", "role": "viewer", "password": PASSWORD})
    assert added.status_code == 422
    assert (
        post(team, {"email": "a@acme.test", "role": "viewer", "password": "x\x00" * 6}).status_code
        == 422
    )


def test_a_creating_form_sent_twice_creates_once_and_shows_no_secret_again(
    signed_in, agent_id, tenant
):
    """Reloading the page that answered a creating form sends the same form again."""
    from app.models import Function, Webhook

    forms = [
        (KEYS, {"name": "production", "scope": "full", "expires": ""}, ApiKey),
        (
            "/dashboard/webhooks/new",
            {"url": "http://127.0.0.1:9/in", "events": "call.ended", "secret": "s" * 20},
            Webhook,
        ),
        (
            f"/dashboard/agents/{agent_id}/functions",
            {
                "name": "lookup",
                "description": "Looks up.",
                "endpoint": "http://127.0.0.1:9/fn",
                "method": "POST",
                "parameters": '{"type": "object", "properties": {}}',
            },
            Function,
        ),
    ]
    for path, fields, model in forms:
        token = csrf_token(signed_in.get(KEYS))
        data = {**fields, "csrf_token": token, "form_id": f"form-of-{model.__name__}"}
        before = model.select().count()
        first = signed_in.post(path, data=data)
        assert first.status_code == 201, (path, first.status_code)
        again = signed_in.post(path, data=data)
        assert again.status_code == 302, path
        page = signed_in.get(again.headers["Location"]).get_data(True)
        assert "This form was sent already" in page
        assert model.select().count() == before + 1, path
