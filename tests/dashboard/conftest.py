"""Dashboard tests through Flask's test client: users of each role, signed in."""

import re
import secrets

import pytest
from flask.testing import FlaskClient

from app.services import users as user_service
from tests.helpers import ACTOR

PASSWORD = "correct horse battery"


def csrf_token(page) -> str:
    match = re.search(r'name="csrf_token" type="hidden" value="([^"]+)"', page.get_data(True))
    if match is None:
        match = re.search(r'name="csrf_token" value="([^"]+)"', page.get_data(True))
    assert match, "the page has no CSRF token"
    return match.group(1)


def sign_in(client, email, password=PASSWORD):
    page = client.get("/dashboard/sign-in")
    return client.post(
        "/dashboard/sign-in",
        data={"email": email, "password": password, "csrf_token": csrf_token(page)},
    )


class PerRequestContextClient(FlaskClient):
    """Each request in an app context of its own, as in a server: the test's own context
    would otherwise share flask.g (and the CSRF token kept there) across requests."""

    def open(self, *args, **kwargs):
        with self.application.app_context():
            return super().open(*args, **kwargs)


@pytest.fixture
def client(app):
    app.test_client_class = PerRequestContextClient
    return app.test_client()


@pytest.fixture
def owner(tenant):
    return user_service.create_user(
        actor=ACTOR, tenant=tenant, email="owner@acme.test", password=PASSWORD, role="owner"
    )


@pytest.fixture
def viewer(tenant):
    return user_service.create_user(
        actor=ACTOR, tenant=tenant, email="viewer@acme.test", password=PASSWORD, role="viewer"
    )


@pytest.fixture
def signed_in(client, owner):
    """client, signed in as the tenant's owner."""
    assert sign_in(client, owner.email).status_code == 302
    return client


@pytest.fixture
def post(signed_in):
    """POST a dashboard form as the signed-in user, with the CSRF token of a page."""

    def post(path, data=None, token_from="/dashboard/"):
        """A form as a browser sends it: its token, and an id of its own (form_id)."""
        token = csrf_token(signed_in.get(token_from))
        fields = {"form_id": secrets.token_urlsafe(16), **(data or {}), "csrf_token": token}
        return signed_in.post(path, data=fields)

    return post
