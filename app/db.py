"""Database binding: one DatabaseProxy, SQLite or PostgreSQL from DATABASE_URL, migrations."""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import peewee
from flask import Flask
from peewee_migrate import Router
from playhouse.db_url import connect

database = peewee.DatabaseProxy()

MIGRATIONS_DIR = Path(__file__).parent / "migrations"

# busy_timeout first: switching to WAL needs the lock it waits for.
SQLITE_PRAGMAS = (
    ("busy_timeout", 10_000),
    ("journal_mode", "wal"),
    ("foreign_keys", 1),
    ("synchronous", "normal"),
)


class BaseModel(peewee.Model):
    class Meta:
        database = database
        legacy_table_names = False


def resolve_url(url: str, project_root: str) -> str:
    """Make a relative SQLite path relative to the project folder, creating its directory."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and ":memory:" not in url:
        path = os.path.join(project_root, url[len(prefix) :])
        url = prefix + path
    if url.startswith(prefix) and ":memory:" not in url:
        Path(url[len(prefix) :].split("?")[0]).parent.mkdir(parents=True, exist_ok=True)
    return url


def make_database(url: str) -> peewee.Database:
    """Open (lazily) the database named by url."""
    options: dict[str, Any] = {}
    if url.startswith("sqlite"):
        # Write transactions take the write lock at BEGIN, so a transaction that reads and
        # then writes waits for busy_timeout instead of failing with "database is locked".
        options = {"pragmas": SQLITE_PRAGMAS, "lock_type": "IMMEDIATE"}
    return connect(url, **options)


def is_sqlite() -> bool:
    return isinstance(database.obj, peewee.SqliteDatabase)


def migration_router(db: peewee.Database | None = None) -> Router:
    return Router(db or database.obj, migrate_dir=MIGRATIONS_DIR, ignore=["basemodel"])


def upgrade(db: peewee.Database | None = None) -> list[str]:
    """Apply every pending migration; return the names applied."""
    router = migration_router(db)
    pending = router.diff
    router.run()
    return list(pending)


def _connect() -> None:
    database.connect(reuse_if_open=True)


def _close(exc: BaseException | None = None) -> None:
    if not database.is_closed():
        database.close()


def init_app(app: Flask) -> None:
    url = resolve_url(app.config["DATABASE_URL"], os.path.dirname(app.instance_path))
    app.config["DATABASE_URL"] = url
    database.initialize(make_database(url))
    app.before_request(_connect)
    app.teardown_appcontext(_close)


@contextmanager
def connection() -> Iterator[None]:
    """A connection for work outside a request (jobs, threads); closed after if opened here."""
    if not database.is_closed():
        yield
        return
    database.connect()
    try:
        yield
    finally:
        database.close()
