"""GET /metrics: Prometheus text, behind its token."""

import pytest

from app import create_app
from tests.helpers import assert_error


@pytest.fixture
def metrics_client(app_config):
    return create_app({**app_config, "METRICS_TOKEN": "m-token"}).test_client()


def test_metrics_disabled_without_token(client):
    assert_error(client.get("/metrics"), 404, "not_found")


def test_metrics_need_the_token(metrics_client):
    assert_error(metrics_client.get("/metrics"), 401, "unauthorized")
    response = metrics_client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert_error(response, 401, "unauthorized")


def test_metrics_count_requests_by_route_and_status(metrics_client):
    metrics_client.get("/healthz")
    response = metrics_client.get("/metrics", headers={"Authorization": "Bearer m-token"})
    assert response.status_code == 200
    assert response.mimetype == "text/plain"
    text = response.get_data(as_text=True)
    assert 'voiceagent_http_requests_total{method="GET",route="/healthz",status="200"}' in text
    assert "voiceagent_http_request_duration_seconds_bucket" in text


def test_metrics_show_queue_depths_and_the_process(app_config, redis_client, redis_url):
    config = {**app_config, "METRICS_TOKEN": "m-token", "REDIS_URL": redis_url}
    client = create_app(config).test_client()
    text = client.get("/metrics", headers={"Authorization": "Bearer m-token"}).get_data(True)
    assert 'voiceagent_queue_depth{queue="functions"} 0.0' in text
    assert 'voiceagent_queue_depth{queue="webhooks"} 0.0' in text
    assert 'voiceagent_queue_depth{queue="webhooks_slow"} 0.0' in text
    assert "python_info" in text  # the default registry's own collectors
    assert text.count("# TYPE voiceagent_http_requests_total counter") == 1
