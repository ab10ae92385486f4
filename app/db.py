"""Database binding: one DatabaseProxy, SQLite or PostgreSQL from DATABASE_URL, migrations."""

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar, Token
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import peewee
from flask import Flask
from peewee_migrate import Router
from playhouse.db_url import connect

database = peewee.DatabaseProxy()

MIGRATIONS_DIR = Path(__file__).parent / "migrations"

# The PostgreSQL advisory lock that `flask db upgrade` holds while it migrates: any fixed
# number, the same on every host (the ASCII of "voiceage" read as a 64-bit integer).
MIGRATION_LOCK_KEY = 0x766F696365616765
# How long an upgrade waits for another host's upgrade to finish on SQLite (milliseconds):
# its busy_timeout while it takes the write lock.
MIGRATION_WAIT_MS = 15 * 60 * 1000

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

    if TYPE_CHECKING:
        # peewee adds <foreign key>_id accessors at run time; let the type checker see them.
        def __getattr__(self, name: str) -> Any: ...


def resolve_url(url: str, project_root: str) -> str:
    """Make a relative SQLite path relative to the project folder, creating its directory."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and ":memory:" not in url:
        url = prefix + os.path.join(project_root, url[len(prefix) :])
    if url.startswith(prefix) and ":memory:" not in url:
        Path(url[len(prefix) :].split("?")[0]).parent.mkdir(parents=True, exist_ok=True)
    return url


def make_database(url: str) -> peewee.Database:
    """A connection pool (peewee's own) on the database named by url.

    Pooled so a request does not pay for a new connection (and, on SQLite, the pragmas) each
    time; closing a connection returns it to the pool. On SQLite every transaction begins
    IMMEDIATE: it takes the write lock at BEGIN and waits for it up to busy_timeout, where a
    deferred transaction that reads and then writes would fail at once with "database is
    locked" when another process wrote in between.
    """
    scheme, sep, rest = url.partition("://")
    options: dict[str, Any] = {"max_connections": 32, "stale_timeout": 300}
    if scheme.startswith("sqlite"):
        options |= {
            "pragmas": SQLITE_PRAGMAS,
            "lock_type": "IMMEDIATE",
            "check_same_thread": False,
            "returning_clause": True,  # SQLite 3.35+, as PostgreSQL: UPDATE ... RETURNING
        }
    if "+pool" not in scheme and ":memory:" not in rest:
        scheme += "+pool"
    return connect(scheme + sep + rest, **options)


# The write-lock file of the current thread's transaction on SQLite (queue_for_writing).
_writing = threading.local()


def queue_for_writing() -> None:
    """On SQLite, wait for the other writers on a file lock beside the database file (flock),
    before BEGIN IMMEDIATE takes SQLite's own write lock; nothing on PostgreSQL.

    SQLite lets one transaction write at a time, and a writer that finds its lock taken sleeps
    1, 2, 5, 10, 15, 20, 25, 25 ... ms between tries (SQLite's busy handler): it goes on
    sleeping after the lock is free, so under a steady stream of short transactions from the
    web and worker processes the unlucky writer waits several times as long as the lock was
    held. The kernel wakes an flock's waiter as soon as the holder lets go, and lets go for a
    process that dies. Taken once per outermost transaction of a thread; left by
    leave_writing_queue."""
    target = database.obj
    if not isinstance(target, peewee.SqliteDatabase) or getattr(_writing, "fd", None) is not None:
        return
    path = target.database
    if not path or path == ":memory:" or "mode=memory" in path:
        return
    fd = os.open(f"{path}-writer", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    _writing.fd = fd


def leave_writing_queue() -> None:
    """Let the next SQLite writer in (closing the file lets its flock go); nothing when this
    thread holds none."""
    fd = getattr(_writing, "fd", None)
    if fd is not None:
        _writing.fd = None
        os.close(fd)


@contextmanager
def transaction() -> Iterator[None]:
    """database.atomic(), after queueing for writing on SQLite (queue_for_writing); inside
    another transaction, atomic()'s savepoint. The queue is left as soon as COMMIT is done,
    before the jobs the transaction enqueues after commit, and on a rollback."""
    if database.in_transaction():
        with database.atomic():
            yield
        return
    queue_for_writing()
    try:
        with database.atomic():
            database.after_commit(leave_writing_queue)
            yield
    finally:
        leave_writing_queue()


@dataclass
class HeldUnit:
    """A unit of work its caller holds open: the HTTP layer's request with an Idempotency-Key,
    whose stored answer must commit with the change. began: whether a service has begun its
    transaction (left open for the caller to commit or roll back)."""

    began: bool = False


_held: ContextVar[HeldUnit | None] = ContextVar("held_unit_of_work", default=None)


@contextmanager
def unit_of_work() -> Iterator[None]:
    """The transaction a service makes a change in (DESIGN section 10): database.atomic().

    While the caller holds the unit of work (hold_unit_of_work), the first such transaction
    begins the caller's and leaves it open: the caller stores its answer in it and commits
    (app.resources.idempotency). It begins here, after whatever network work the service does
    first (a URL's DNS check), so no transaction ever waits on the network. An exception
    rolls it back at once, as atomic() would."""
    held = _held.get()
    if held is None or database.in_transaction():
        with transaction():
            yield
        return
    queue_for_writing()
    database.session_start()
    database.after_commit(leave_writing_queue)
    held.began = True
    try:
        yield
    except BaseException:
        held.began = False
        end_held_unit(commit=False)
        raise


def hold_unit_of_work() -> Token[HeldUnit | None]:
    """Hold the next unit of work open for the caller; give the token to release_unit_of_work."""
    return _held.set(HeldUnit())


def release_unit_of_work(token: Token[HeldUnit | None]) -> bool:
    """Stop holding; whether a service began the held transaction, which is still open: the
    caller commits or rolls it back (end_held_unit)."""
    held = _held.get()
    _held.reset(token)
    return held is not None and held.began


def end_held_unit(*, commit: bool) -> None:
    """Commit or roll back the held unit of work's transaction (a failed COMMIT rolls back,
    as atomic() does: it may leave the transaction open), and leave the writers' queue."""
    try:
        if not commit:
            database.session_rollback()
            return
        try:
            database.session_commit()
        except Exception:
            with suppress(Exception):
                database.rollback()
            raise
    finally:
        leave_writing_queue()


def is_sqlite() -> bool:
    return isinstance(database.obj, peewee.SqliteDatabase)


def close_all(db: peewee.Database | None = None) -> None:
    """Close every pooled connection (before copying a SQLite file, forking, or at exit)."""
    target = db or database.obj
    if hasattr(target, "close_all"):
        target.close_all()
    elif not target.is_closed():
        target.close()


def migration_router(db: peewee.Database | None = None) -> Router:
    return Router(db or database.obj, migrate_dir=MIGRATIONS_DIR, ignore=["basemodel"])


@contextmanager
def migration_lock(target: peewee.Database) -> Iterator[None]:
    """Hold the database's migration lock: of several hosts upgrading at once, one migrates
    and the others wait here until it is done.

    PostgreSQL: a session advisory lock (DDL there cannot be serialised by a row lock, and
    two CREATE TABLE of one name at once fail on the catalog's unique index). SQLite: the
    write lock, taken at BEGIN IMMEDIATE, for the whole run; the migrations' own transactions
    nest in it. The connection is this thread's, opened here and kept until the lock is
    released.
    """
    target.connect(reuse_if_open=True)
    if isinstance(target, peewee.PostgresqlDatabase):
        target.execute_sql("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        try:
            yield
        finally:
            target.execute_sql("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
    elif isinstance(target, peewee.SqliteDatabase):
        # Another host's migration may take longer than busy_timeout: wait for it.
        busy_timeout = dict(SQLITE_PRAGMAS)["busy_timeout"]
        target.execute_sql(f"PRAGMA busy_timeout = {MIGRATION_WAIT_MS}")
        try:
            with target.atomic(lock_type="IMMEDIATE"):
                yield
        finally:
            target.execute_sql(f"PRAGMA busy_timeout = {busy_timeout}")
    else:
        yield


def upgrade(db: peewee.Database | None = None) -> list[str]:
    """Apply every pending migration; return the names applied.

    Safe to run on several hosts at once: under migration_lock, the first applies what is
    pending and the others then find nothing left to apply.

    On SQLite, foreign keys are off while the migrations run. SQLite changes a column (makes
    it NOT NULL, say) by copying the table and dropping the old one, and with foreign keys on
    that DROP deletes every row that refers to the table (ON DELETE CASCADE): an API key
    column added to the tenant table deleted every key. The pragma cannot change inside a
    transaction (migration_lock holds one on SQLite), so it is set around the lock, and
    foreign_key_check then proves that every reference still holds.
    """
    target = db or database.obj
    target.connect(reuse_if_open=True)
    sqlite = isinstance(target, peewee.SqliteDatabase)
    if sqlite:
        target.execute_sql("PRAGMA foreign_keys = OFF")
    try:
        with migration_lock(target):
            router = migration_router(target)
            pending = router.diff
            router.run()
    finally:
        if sqlite:
            target.execute_sql("PRAGMA foreign_keys = ON")
    if sqlite and pending:
        broken = target.execute_sql("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise RuntimeError(f"The migrations left rows whose references broke: {broken[:5]}")
    return list(pending)


def _connect() -> None:
    database.connect(reuse_if_open=True)


def _close(exc: BaseException | None = None) -> None:
    leave_writing_queue()  # a request or job never leaves its thread holding it
    if not database.is_closed():
        database.close()


def init_app(app: Flask) -> None:
    url = resolve_url(app.config["DATABASE_URL"], os.path.dirname(app.instance_path))
    app.config["DATABASE_URL"] = url
    database.initialize(make_database(url))
    app.before_request(_connect)
    app.teardown_appcontext(_close)
