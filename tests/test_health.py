"""Health endpoints for load balancers."""

import pytest

from app import create_app


def test_healthz_answers_without_key(client):
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json == {"status": "ok"}


def test_readyz_checks_database(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json == {"status": "ready", "checks": {"database": "ok"}}


def test_readyz_checks_redis_when_configured(app_config, redis_url):
    app = create_app({**app_config, "REDIS_URL": redis_url, "QUEUE_MODE": "inline"})
    response = app.test_client().get("/readyz")
    assert response.json["checks"] == {"database": "ok", "redis": "ok"}


@pytest.mark.parametrize("redis_url", ["redis://127.0.0.1:1/0"])
def test_readyz_is_unavailable_when_redis_is_down(app_config, redis_url):
    app = create_app({**app_config, "REDIS_URL": redis_url, "QUEUE_MODE": "inline"})
    response = app.test_client().get("/readyz")
    assert response.status_code == 503
    assert response.json["status"] == "unavailable"
    assert response.json["checks"]["redis"].startswith("error")
