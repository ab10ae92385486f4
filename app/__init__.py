"""Voice Agent Management API: the application factory."""

import os
import time
from typing import Any

from flask import Flask, g
from werkzeug.middleware.proxy_fix import ProxyFix

from app import auth, db, errors, logs, metrics, queue, ratelimit
from app import config as default_config
from app.bodies import MeasuredBodies
from app.encoding import OrjsonProvider
from app.extensions import api
from app.resources.guards import refuse_oversized_head
from app.resources.idempotency import IdempotencyPlugin
from app.resources.spec import SpecPlugin
from app.util import new_id

TRUE_WORDS = {"1", "true", "yes", "on"}


def load_environment(config: dict[str, Any]) -> None:
    """Environment variables override every documented setting of app/config.py."""
    for name in dir(default_config):
        if not name.isupper() or name not in os.environ:
            continue
        raw = os.environ[name]
        default = getattr(default_config, name)
        if isinstance(default, dict | list):
            continue
        if isinstance(default, bool):
            config[name] = raw.strip().lower() in TRUE_WORDS
        elif isinstance(default, int):
            config[name] = int(raw)
        elif isinstance(default, float):
            config[name] = float(raw)
        else:
            config[name] = raw or None


def finish_config(config: dict[str, Any]) -> None:
    if not config.get("QUEUE_MODE"):
        config["QUEUE_MODE"] = "rq" if config.get("REDIS_URL") else "inline"
    if config["QUEUE_MODE"] not in ("rq", "inline"):
        raise RuntimeError("QUEUE_MODE must be rq or inline.")
    if config["QUEUE_MODE"] == "rq" and not config.get("REDIS_URL"):
        raise RuntimeError("QUEUE_MODE=rq needs REDIS_URL.")
    if config["WEBHOOK_LEASE_SECONDS"] < config["WEBHOOK_TIMEOUT"] + 2:
        # A delivery's job must end (RQ stops it a second before the lease ends) before
        # another may take the delivery over, and an attempt needs time to be written.
        raise RuntimeError(
            "WEBHOOK_LEASE_SECONDS must be at least WEBHOOK_TIMEOUT + 2 seconds "
            f"({config['WEBHOOK_TIMEOUT']:g} + 2 s)."
        )


def create_app(test_config: dict[str, Any] | None = None) -> Flask:
    """Build the app: defaults, then instance/config.py, then environment, then test_config."""
    app = Flask(__name__, instance_relative_config=True, static_folder=None)
    app.config.from_object(default_config)
    app.config.from_pyfile("config.py", silent=True)
    load_environment(app.config)
    if test_config is not None:
        app.config.from_mapping(test_config)
    finish_config(app.config)
    json_provider = OrjsonProvider(app)
    json_provider.sort_keys = False  # responses keep the schemas' field order
    app.json = json_provider

    app.wsgi_app = MeasuredBodies(app.wsgi_app, app.config["MAX_CONTENT_LENGTH"])  # type: ignore[method-assign]
    if app.config["TRUSTED_PROXIES"]:
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=app.config["TRUSTED_PROXIES"])  # type: ignore[method-assign]
    db.init_app(app)
    register_request_id(app)
    app.before_request(refuse_oversized_head)  # before authentication reads any header
    logs.init_app(app)
    metrics.init_app(app)
    app.before_request(auth.authenticate_request)
    ratelimit.init_app(app)
    app.before_request(auth.authorize_request)
    # Unions (the events) as oneOf with a discriminator; Idempotency-Key on every POST of the
    # tenant API.
    api.init_app(
        app,
        spec_kwargs={"marshmallow_plugin": SpecPlugin(), "extra_plugins": [IdempotencyPlugin()]},
    )
    errors.init_app(app)
    queue.init_app(app)

    from app.resources import docs, register_blueprints
    from app.runtime import routes as runtime_routes

    register_blueprints(api)
    api.register_blueprint(runtime_routes.blp)
    app.register_blueprint(docs.blp)

    from app import dashboard

    dashboard.init_app(app)

    from app import cli

    cli.init_app(app)
    return app


def register_request_id(app: Flask) -> None:
    """Every response carries X-Request-Id; error bodies repeat it as requestId.

    The same hook notes when the request began (g.request_started): its log line and its
    latency metric both measure from there.
    """

    @app.before_request
    def begin_request() -> None:
        g.request_started = time.perf_counter()
        g.request_id = new_id("req")

    @app.after_request
    def add_request_id(response):
        response.headers["X-Request-Id"] = g.get("request_id") or new_id("req")
        return response
