"""gunicorn in front of the app (deploy/gunicorn.conf.py): its own limits on heads and bodies, and
the JSON error body within them."""

import requests

from tests.helpers import assert_error
from tests.test_errors import assert_server_answer, chunks


def test_gunicorn_answers_json_up_to_its_own_limits(workers, redis_url):
    """deploy/gunicorn.conf.py lets every head within its limits reach the app, which answers
    over-long ones in its error body; beyond gunicorn's limits gunicorn answers itself."""
    base = workers.start_web(workers=1, REDIS_URL=redis_url)
    assert_error(requests.get(base + "/" + "x" * 6000, timeout=10), 404, "not_found")
    assert_error(requests.get(base + "/" + "x" * 8100, timeout=10), 414, "uri_too_long")
    big_header = requests.get(base + "/healthz", headers={"X-Padding": "p" * 10240}, timeout=10)
    assert_error(big_header, 431, "header_too_large")
    assert_server_answer(requests.get(base + "/" + "x" * 8200, timeout=10), 414)
    huge_header = requests.get(base + "/healthz", headers={"X-Padding": "p" * 16400}, timeout=10)
    assert_server_answer(huge_header, 431)
    many = {f"X-Header-{number}": "v" for number in range(101)}
    assert_server_answer(requests.get(base + "/healthz", headers=many, timeout=10), 431)
    assert requests.get(base + "/healthz", timeout=10).status_code == 200


def test_a_chunked_body_over_the_limit_is_413_behind_gunicorn(workers, redis_url, api_key):
    """However the body is sent: 3 MB chunked is refused whole, never cut at 1 MiB and taken."""
    base = workers.start_web(workers=1, REDIS_URL=redis_url)
    headers = {"x-api-key": api_key, "Content-Type": "application/json"}
    response = requests.post(
        base + "/api/v1/agents", data=chunks(3 * 1024 * 1024), headers=headers, timeout=30
    )
    assert_error(response, 413, "payload_too_large")
    listed = requests.get(base + "/api/v1/agents", headers=headers, timeout=10).json()
    assert [agent["name"] for agent in listed["agents"]] == []
