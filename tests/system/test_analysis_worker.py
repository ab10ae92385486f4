"""Post-call analysis on real queues: worker.py's analysis pool runs the job, and a failed
request is tried again through RQ's schedule (its workers' scheduler), not in the web
process."""

import pytest

from app.models import Call
from tests.call_flow import RUNTIME, answer, end, start
from tests.fake_gemini import API_KEY
from tests.system.workers import rq_config, wait_for_worker, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def app_config(app_config, redis_url, redis_client):
    return rq_config(app_config, redis_url)


def test_the_analysis_pool_analyses_a_call_and_retries_through_the_schedule(
    client, runtime_headers, did, workers, redis_client, fake_gemini
):
    workers.start(
        queues=("webhooks",),
        GEMINI_API_KEY=API_KEY,
        GEMINI_API_URL=fake_gemini.url,
        ANALYSIS_RETRY_DELAYS="0.2,0.2",
    )
    wait_for_worker(workers, redis_client, ("analysis",))
    fake_gemini.then("status", 503)
    call_id = start(client, runtime_headers, did).json["id"]
    answer(client, runtime_headers, call_id)
    turns = [{"role": "caller", "text": "Saya mau pesan."}]
    client.post(f"{RUNTIME}/{call_id}/transcript", json={"turns": turns}, headers=runtime_headers)
    assert end(client, runtime_headers, call_id).status_code == 200
    wait_until(
        lambda: Call.get_by_id(call_id).analysis_status == "done",
        30,
        "the call was not analysed",
        workers,
    )
    assert len(fake_gemini.requests) == 2  # the 503, then the answer
    assert Call.get_by_id(call_id).analysis["summary"] == "summary from the call"
