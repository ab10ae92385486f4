"""Job queues: RQ on Redis, or inline in the web process when there is no Redis.

Work that a transaction causes (a webhook delivery, say) is deferred with defer() and
enqueued only after that transaction commits, so a job never sees uncommitted rows and a
rolled-back change sends nothing. The database row stays the truth; a lost enqueue is
picked up again by the delivery sweeper.
"""

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from importlib import import_module
from typing import Any

from flask import current_app
from redis import Redis

from app.db import database

log = logging.getLogger(__name__)

_deferred: ContextVar[list[tuple[str, str, tuple[Any, ...]]] | None] = ContextVar(
    "deferred_jobs", default=None
)


def redis_connection() -> Redis:
    """The app's Redis client (one per process, created on first use)."""
    client = current_app.extensions.get("redis")
    if client is None:
        client = Redis.from_url(
            current_app.config["REDIS_URL"], socket_connect_timeout=2, socket_timeout=5
        )
        current_app.extensions["redis"] = client
    return client


@contextmanager
def transaction() -> Iterator[None]:
    """A write transaction; jobs deferred inside it are enqueued after it commits."""
    outer = _deferred.get()
    if outer is not None:  # nested: the outermost transaction enqueues
        with database.atomic():
            yield
        return
    jobs: list[tuple[str, str, tuple[Any, ...]]] = []
    token = _deferred.set(jobs)
    try:
        with database.atomic():
            yield
    finally:
        _deferred.reset(token)
    for queue_name, func_path, args in jobs:
        enqueue(queue_name, func_path, *args)


def defer(queue_name: str, func_path: str, *args: Any) -> None:
    """Enqueue func_path(*args) on queue_name once the current transaction() commits."""
    jobs = _deferred.get()
    if jobs is None:
        raise RuntimeError("defer() must be called inside queue.transaction()")
    jobs.append((queue_name, func_path, args))


def resolve(func_path: str) -> Any:
    module, _, name = func_path.rpartition(".")
    return getattr(import_module(module), name)


def enqueue(queue_name: str, func_path: str, *args: Any) -> None:
    """Send a job to its RQ queue, or run it now in inline mode. Never raises for Redis."""
    if current_app.config["QUEUE_MODE"] == "inline":
        resolve(func_path)(*args)
        return
    from rq import Queue

    try:
        Queue(queue_name, connection=redis_connection()).enqueue(func_path, *args)
    except Exception:  # Redis down: the sweeper enqueues it again from the database row
        log.warning(
            "could not enqueue %s%s on %s; the sweeper will retry", func_path, args, queue_name
        )
