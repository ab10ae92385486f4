"""Redis connection and job queues (RQ, or inline in the web process when there is no Redis)."""

from flask import current_app
from redis import Redis


def redis_connection() -> Redis:
    """The app's Redis client (one per process, created on first use)."""
    client = current_app.extensions.get("redis")
    if client is None:
        client = Redis.from_url(
            current_app.config["REDIS_URL"], socket_connect_timeout=2, socket_timeout=5
        )
        current_app.extensions["redis"] = client
    return client
