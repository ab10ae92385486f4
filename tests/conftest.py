"""Fixtures: an app on a fresh SQLite file (or PostgreSQL database) per test, tenants, keys."""

import os
import shutil
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
from playhouse.db_url import connect
from redis import Redis

from app import create_app, db, queue
from app.models import ALL_MODELS
from app.services import keys as key_service
from app.services import tenants as tenant_service
from tests.fake_gemini import FakeGemini
from tests.fake_graph import FakeGraph
from tests.helpers import ACTOR

TEST_DATABASE_URL = os.environ.get("TEST_DATABASE_URL", "")
TEST_REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
RUNTIME_TOKEN = "test-runtime-token"
# A Fernet key for the stored provider secrets (SECRETS_KEY), fixed for the tests.
TEST_SECRETS_KEY = "x0cBGGjWc-8YbxzvfW4xUukL7FX1U3xpSBzXcRkQmLY="


def pytest_report_header(config):
    return [f"database: {TEST_DATABASE_URL or 'SQLite files'}; redis: {TEST_REDIS_URL}"]


def using_postgres() -> bool:
    return TEST_DATABASE_URL.startswith("postgres")


# The contract test runs on SQLite only, and schemathesis builds its cases as the module is
# collected (seconds): the PostgreSQL pass does not collect it at all.
collect_ignore = ["test_contract.py"] if using_postgres() else []


def pytest_collection_modifyitems(config, items):
    """Checks of one database's own behaviour run only in that database's pass."""
    other = "sqlite_only" if using_postgres() else "postgres_only"
    deselected = [item for item in items if item.get_closest_marker(other)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker(other)]


@pytest.fixture(scope="session")
def database_template(tmp_path_factory):
    """A migrated database: a SQLite file to copy, or a fresh PostgreSQL database."""
    if using_postgres():
        name = f"va_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        admin = connect(TEST_DATABASE_URL)
        admin.execute_sql(f'CREATE DATABASE "{name}"')
        url = TEST_DATABASE_URL.rsplit("/", 1)[0] + "/" + name
        database = connect(url)
        db.upgrade(database)
        database.close()
        yield url
        admin.execute_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
    else:
        path = tmp_path_factory.mktemp("template") / "template.db"
        database = db.make_database(f"sqlite:///{path}")
        db.upgrade(database)
        db.close_all(database)
        yield path


def fresh_database_url(template, tmp_path) -> str:
    if using_postgres():
        # DELETE, not TRUNCATE: a test leaves a few rows, which DELETE removes in milliseconds
        # where TRUNCATE, which gives every table a new file, took about 90 ms. ALL_MODELS
        # lists each table after those it refers to.
        database = connect(template)
        with database.atomic():
            for model in reversed(ALL_MODELS):
                database.execute(model.delete())
        database.close()
        return template
    path = tmp_path / "test.db"
    shutil.copy(template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def app_config(database_template, tmp_path, graph_server, gemini_server):
    return {
        "TESTING": True,
        "DATABASE_URL": fresh_database_url(database_template, tmp_path),
        "REDIS_URL": None,
        "QUEUE_MODE": "inline",
        "RUNTIME_TOKEN": RUNTIME_TOKEN,
        "ALLOW_PRIVATE_URLS": True,
        "SECRET_KEY": "test-secret-key-0123456789abcdef",
        "SECRETS_KEY": TEST_SECRETS_KEY,
        # Meta's Graph API: the tests' stand-in on 127.0.0.1, never Meta.
        "WHATSAPP_GRAPH_URL": graph_server.url,
        # Gemini: the tests' stand-in on 127.0.0.1, never Google. No key: calls are not
        # analysed (not_configured) unless a test gives one (tests/fake_gemini.API_KEY).
        "GEMINI_API_URL": gemini_server.url,
        "ANALYSIS_RETRY_DELAYS": (0.05, 0.05),
        "ANALYSIS_BUSY_DELAY": 0.05,
    }


@pytest.fixture(scope="session")
def graph_server():
    with FakeGraph() as graph:
        yield graph


@pytest.fixture(scope="session")
def gemini_server():
    with FakeGemini() as gemini:
        yield gemini


@pytest.fixture
def fake_gemini(gemini_server):
    """The Gemini stand-in every app of the tests points at, emptied for this test."""
    gemini_server.reset()
    yield gemini_server
    gemini_server.reset()


@pytest.fixture
def fake_graph(graph_server):
    """The Graph API stand-in every app of the tests points at, emptied for this test."""
    graph_server.reset()
    yield graph_server
    graph_server.reset()


@pytest.fixture(autouse=True)
def inline_workers_stop(monkeypatch):
    """Stop every inline background thread a test started, from any app it built.

    Left running, such a thread goes on sweeping with its app's settings; on PostgreSQL,
    where the tests share one database, it took later tests' deliveries (and with the
    default retry scale put their next attempt half an hour away).
    """
    started: list[queue.InlineWorker] = []

    class Tracked(queue.InlineWorker):
        def __init__(self, app) -> None:
            super().__init__(app)
            started.append(self)

    monkeypatch.setattr(queue, "InlineWorker", Tracked)
    yield
    for worker in started:
        worker.stop()


@pytest.fixture
def app(app_config):
    app = create_app(app_config)
    with app.app_context():
        yield app
        queue.shutdown(app)
        db.close_all()


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def runner(app):
    return app.test_cli_runner()


@pytest.fixture
def tenant(app):
    return tenant_service.create_tenant(actor=ACTOR, name="acme", plan="business")


@pytest.fixture
def api_key(tenant):
    return key_service.create_key(actor=ACTOR, tenant=tenant, name="test")[1]


@pytest.fixture
def headers(api_key):
    return {"x-api-key": api_key}


@pytest.fixture
def other_tenant(app):
    return tenant_service.create_tenant(actor=ACTOR, name="globex", plan="business")


@pytest.fixture
def other_headers(other_tenant):
    return {"x-api-key": key_service.create_key(actor=ACTOR, tenant=other_tenant, name="test")[1]}


@pytest.fixture
def runtime_headers():
    return {"Authorization": f"Bearer {RUNTIME_TOKEN}"}


@pytest.fixture
def agent_id(client, headers):
    response = client.post(
        "/api/v1/agents", json={"name": "Reception", "systemPrompt": "Be helpful."}, headers=headers
    )
    assert response.status_code == 201
    return response.json["id"]


def worker_redis_url(base_url: str, worker: str) -> str:
    """The Redis database of one pytest-xdist worker: gw0 takes TEST_REDIS_URL's DB number,
    gw1 the one below it, and so on, so that workers never flush each other's jobs."""
    index = int(worker.removeprefix("gw")) if worker.startswith("gw") else 0
    if index == 0:
        return base_url
    parts = urlsplit(base_url)
    number = int(parts.path.strip("/") or 0) - index
    if number < 0:
        raise pytest.UsageError(
            f"TEST_REDIS_URL {base_url} leaves no Redis DB number for test worker {worker}: "
            "give it a DB number of at least the worker count minus one."
        )
    return urlunsplit(parts._replace(path=f"/{number}"))


@pytest.fixture(scope="session")
def redis_url():
    """A real Redis (its own DB number, one per test worker); the whole run stops with a clear
    message without one."""
    url = worker_redis_url(TEST_REDIS_URL, os.environ.get("PYTEST_XDIST_WORKER", ""))
    client = Redis.from_url(url, socket_connect_timeout=2)
    try:
        client.ping()
    except Exception as exc:
        pytest.exit(
            f"These tests need Redis at {url} (set TEST_REDIS_URL to change it): "
            f"{exc}. Install and start it, e.g. `apt-get install redis-server` then "
            "`redis-server --daemonize yes`.",
            returncode=3,
        )
    return url


@pytest.fixture
def redis_client(redis_url):
    client = Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def workers(app, tmp_path):
    """Real worker.py (and gunicorn) processes on the test's database, stopped at the end."""
    from tests.system.workers import Workers

    started = Workers(app, tmp_path)
    yield started
    started.stop()


DID = "+6221555010"


@pytest.fixture
def did(tenant, agent_id):
    """A live number of tenant: assigned to agent_id, with 100 credit minutes to spend."""
    from app.services import billing
    from app.services import phone_numbers as number_service

    number = number_service.add_number(actor=ACTOR, tenant=tenant, display_number=DID, label="Main")
    number_service.assign_agent(actor=ACTOR, tenant=tenant, number_id=number.id, agent_id=agent_id)
    billing.grant(actor=ACTOR, tenant=tenant, minutes=100)
    return DID
