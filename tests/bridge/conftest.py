"""The service the bridge's tests run against: gunicorn and a worker.py for functions and
webhooks, on a database and Redis of their own, with the tenants' receivers and Twilio's
REST API as real HTTP servers on 127.0.0.1; one for the whole package."""

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis import Redis

from app import create_app, db
from tests.bridge.stack import TWILIO_BOT
from tests.conftest import RUNTIME_TOKEN, TEST_SECRETS_KEY, fresh_database_url
from tests.fake_graph import FakeGraph
from tests.receiver import Answer, Receiver
from tests.system.workers import Workers, rq_config, wait_for_worker

# The Twilio bot is a folder of scripts, as Pipecat's examples are (server.py imports bot.py
# by its own name): the tests import its modules from there.
sys.path.insert(0, str(TWILIO_BOT))


def endpoint_answer(request):
    """The tenants' function endpoint: an order's status; /slow takes 4 s."""
    order = json.loads(request.body)["parameters"].get("orderId")
    body = json.dumps({"orderId": order, "status": "shipped"}).encode()
    return Answer(body=body, delay=4.0 if request.path == "/slow" else 0.0)


def twilio_answer(request):
    """Twilio's REST API: a call the bot hangs up is completed."""
    return Answer(body=b'{"status": "completed"}', headers={"Content-Type": "application/json"})


@dataclass
class Service:
    app: object
    workers: Workers
    base_url: str
    twilio: Receiver
    endpoint: Receiver
    hooks: Receiver
    log_dir: Path
    graph: FakeGraph  # Meta's Graph API (WHATSAPP_GRAPH_URL)

    def logs(self) -> str:
        return self.workers.logs()


@pytest.fixture(scope="package")
def service(database_template, tmp_path_factory, redis_url, graph_server):
    log_dir = tmp_path_factory.mktemp("bridge")
    redis = Redis.from_url(redis_url)
    redis.flushdb()
    config = {
        "TESTING": True,
        "DATABASE_URL": fresh_database_url(database_template, log_dir),
        "RUNTIME_TOKEN": RUNTIME_TOKEN,
        "ALLOW_PRIVATE_URLS": True,
        "SECRET_KEY": "test-secret-key-0123456789abcdef",
        "SECRETS_KEY": TEST_SECRETS_KEY,
        "WHATSAPP_GRAPH_URL": graph_server.url,
    }
    app = create_app(rq_config(config, redis_url))
    workers = Workers(app, log_dir)
    with (
        app.app_context(),
        Receiver(twilio_answer) as twilio,
        Receiver(endpoint_answer) as endpoint,
        Receiver() as hooks,
    ):
        try:
            base_url = workers.start_web(
                workers=2,
                RUNTIME_TOKEN=RUNTIME_TOKEN,
                SECRETS_KEY=TEST_SECRETS_KEY,
                WHATSAPP_GRAPH_URL=graph_server.url,
            )
            workers.start(queues=("functions", "webhooks"))
            wait_for_worker(workers, redis, ("functions", "webhooks"))
            yield Service(app, workers, base_url, twilio, endpoint, hooks, log_dir, graph_server)
        finally:
            workers.stop()
            db.close_all()
            redis.flushdb()
            redis.close()
