"""The application object."""

import pytest
from flask import Flask

from app import create_app
from app.encoding import OrjsonProvider


def test_the_app_is_flask_itself_with_the_orjson_provider(app):
    assert type(app) is Flask
    assert isinstance(app.json, OrjsonProvider) and app.json.sort_keys is False


def test_responses_set_no_cookie(client, headers):
    response = client.get("/api/v1/agents", headers=headers)
    assert response.status_code == 200
    assert "Set-Cookie" not in response.headers and "Vary" not in response.headers


def test_a_lease_shorter_than_an_attempt_is_refused_at_start(app_config):
    message = r"WEBHOOK_LEASE_SECONDS must be at least .*\(10 \+ 2 s\)"
    with pytest.raises(RuntimeError, match=message):
        create_app({**app_config, "WEBHOOK_LEASE_SECONDS": 11})


def test_the_front_page_redirects_to_the_dashboard(client):
    response = client.get("/")
    assert response.status_code == 302 and response.headers["Location"] == "/dashboard/"
    page = client.get("/", follow_redirects=True)
    assert page.status_code == 200 and b"<h1>Sign in</h1>" in page.data


def test_the_docs_with_a_trailing_slash_redirect_to_the_docs(client):
    response = client.get("/api/v1/docs/")
    assert response.status_code == 308 and response.headers["Location"] == "/api/v1/docs"
    docs = client.get("/api/v1/docs/", follow_redirects=True)
    assert docs.status_code == 200 and b"swagger" in docs.data.lower()
