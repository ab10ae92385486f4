"""Storage: migrations from empty, SQLite settings, PostgreSQL when configured."""

import fcntl
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import peewee
import pytest

from app import db
from app.models import ALL_MODELS, JSONField
from tests.conftest import using_postgres


def test_migrations_create_every_table_from_empty(tmp_path):
    database = db.make_database(f"sqlite:///{tmp_path / 'empty.db'}")
    assert db.upgrade(database) == ["001_initial"]
    tables = set(database.get_tables())
    assert {model._meta.table_name for model in ALL_MODELS} <= tables
    assert db.upgrade(database) == []
    database.close()


@pytest.mark.sqlite_only
def test_sqlite_runs_with_wal_foreign_keys_and_busy_timeout(tmp_path):
    database = db.make_database(f"sqlite:///{tmp_path / 'x.db'}")
    database.connect()
    assert database.execute_sql("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert database.execute_sql("PRAGMA foreign_keys").fetchone()[0] == 1
    assert database.execute_sql("PRAGMA busy_timeout").fetchone()[0] == 10_000
    database.close()


def test_relative_sqlite_path_is_under_project(tmp_path):
    url = db.resolve_url("sqlite:///instance/x.db", str(tmp_path))
    assert url == f"sqlite:///{tmp_path}/instance/x.db"
    assert (tmp_path / "instance").is_dir()


def test_app_uses_configured_backend(app):
    expected = peewee.PostgresqlDatabase if using_postgres() else peewee.SqliteDatabase
    assert isinstance(db.database.obj, expected)


@pytest.mark.sqlite_only
def test_sqlite_write_transactions_of_one_process_take_turns(tmp_path):
    """A second thread's transaction begins only once the first has committed, and the turn
    is handed on after a commit, a rollback and a BEGIN that failed."""
    database = db.make_database(f"sqlite:///{tmp_path / 'x.db'}")
    database.execute_sql("CREATE TABLE t (n INTEGER)")
    order: list[str] = []
    holding = threading.Event()

    def first() -> None:
        with database.connection_context(), database.atomic():
            database.execute_sql("INSERT INTO t VALUES (1)")
            holding.set()
            time.sleep(0.3)
            order.append("first commits")

    def second() -> None:
        holding.wait(5)
        order.append(f"lock held: {database._writer.locked()}")
        with database.connection_context(), database.atomic():
            order.append("second begins")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert order == ["lock held: True", "first commits", "second begins"]

    with database.connection_context():
        with pytest.raises(ValueError), database.atomic():
            raise ValueError("rolled back")
        with database.atomic(), database.atomic():  # nested: one turn, one savepoint
            database.execute_sql("INSERT INTO t VALUES (2)")
        database.execute_sql("BEGIN")  # a transaction already open: BEGIN fails
        with pytest.raises(peewee.OperationalError), database.atomic():
            pass
        database.execute_sql("ROLLBACK")
    assert not database._writer.locked()
    database.close_all()


def _taken(path: Path) -> bool:
    """Whether someone holds path's flock (a lock of another open file description, as
    another process's is)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


@contextmanager
def _held_in_another_process(path: Path, seconds: float) -> Iterator[subprocess.Popen]:
    """A process that takes path's flock and says so, holds it for seconds, then says it lets
    go and does."""
    script = (
        "import fcntl, os, sys, time; "
        f"fd = os.open({str(path)!r}, os.O_RDONLY | os.O_CREAT); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); "
        f"time.sleep({seconds}); print('letting go', flush=True); fcntl.flock(fd, fcntl.LOCK_UN)"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            yield holder
        finally:
            holder.kill()


@pytest.mark.sqlite_only
def test_sqlite_write_transactions_of_processes_queue_on_a_lock_file(tmp_path):
    """A write transaction holds the flock of <database>-writer from BEGIN to its end, and
    one begins only when another process let go of it."""
    database = db.make_database(f"sqlite:///{tmp_path / 'x.db'}")
    lock = tmp_path / "x.db-writer"
    database.execute_sql("CREATE TABLE t (n INTEGER)")
    with database.connection_context():
        with database.atomic():
            assert _taken(lock)
            database.execute_sql("INSERT INTO t VALUES (1)")
        assert not _taken(lock)
        with pytest.raises(ValueError), database.atomic():
            raise ValueError("rolled back")
        assert not _taken(lock)

        with _held_in_another_process(lock, 0.3) as holder, database.atomic():
            assert select.select([holder.stdout], [], [], 0)[0]  # it said it lets go
            database.execute_sql("INSERT INTO t VALUES (2)")
        assert database.execute_sql("SELECT count(*) FROM t").fetchone()[0] == 2
    database.close_all()


@pytest.mark.sqlite_only
def test_sqlite_waits_for_the_lock_file_no_longer_than_busy_timeout(tmp_path, monkeypatch):
    """A process that holds the lock file but not SQLite's lock delays a writer only until
    busy_timeout; then the transaction goes on to SQLite, which lets it write."""
    monkeypatch.setattr(db, "SQLITE_BUSY_TIMEOUT_MS", 200)
    database = db.make_database(f"sqlite:///{tmp_path / 'x.db'}")
    with _held_in_another_process(tmp_path / "x.db-writer", 30) as holder:
        with database.connection_context(), database.atomic():
            database.execute_sql("CREATE TABLE t (n INTEGER)")
        assert not select.select([holder.stdout], [], [], 0)[0]  # still holding it
    database.close_all()


@pytest.mark.sqlite_only
def test_a_forked_process_queues_with_its_own_lock_file(tmp_path):
    """A child forked from a process that opened the lock file opens its own: sharing the
    parent's (one open file description) it would take the lock the parent holds."""
    database = db.make_database(f"sqlite:///{tmp_path / 'x.db'}")
    with database.connection_context(), database.atomic():
        database.execute_sql("CREATE TABLE t (n INTEGER)")
        child = os.fork()
        if child == 0:  # the child: may it take the lock now? it must not
            os._exit(0 if database._lock_across_processes(time.monotonic()) is None else 1)
        _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    database.close_all()


@pytest.mark.sqlite_only
def test_sqlite_writes_without_the_lock_file_when_it_cannot_be_opened(tmp_path, caplog):
    (tmp_path / "x.db-writer").mkdir()  # not a file: opening it fails
    database = db.make_database(f"sqlite:///{tmp_path / 'x.db'}")
    with database.connection_context(), database.atomic():
        database.execute_sql("CREATE TABLE t (n INTEGER)")
    assert "SQLite writers of different processes will not queue" in caplog.text
    database.close_all()


@pytest.mark.postgres_only
def test_postgres_sends_begin_with_the_first_statement(app):
    """BEGIN waits for the transaction's first statement and goes with it; the transaction is
    still whole: a rollback undoes that statement, savepoints nest, an empty one sends nothing."""
    import psycopg2.extensions

    database = db.database.obj
    idle = psycopg2.extensions.TRANSACTION_STATUS_IDLE
    database.execute_sql("CREATE TABLE begin_check (n INTEGER)")
    try:
        connection = database.connection()
        with pytest.raises(ValueError), database.atomic():
            assert connection.get_transaction_status() == idle  # nothing sent yet
            database.execute_sql("INSERT INTO begin_check VALUES (1)")
            assert connection.get_transaction_status() != idle
            raise ValueError("rolled back")
        with database.atomic():
            pass
        assert connection.get_transaction_status() == idle
        with database.atomic():
            database.execute_sql("INSERT INTO begin_check VALUES (2)")
            with pytest.raises(ValueError), database.atomic():  # a savepoint
                database.execute_sql("INSERT INTO begin_check VALUES (3)")
                raise ValueError("back to the savepoint")
        database.close()
        with database.atomic():  # opens the connection, and keeps the transaction open
            database.execute_sql("INSERT INTO begin_check VALUES (4)")
        connection = database.connection()
        rows = database.execute_sql("SELECT n FROM begin_check ORDER BY n").fetchall()
        assert rows == [(2,), (4,)]
        assert connection.get_transaction_status() == idle
    finally:
        database.execute_sql("DROP TABLE begin_check")


@pytest.mark.postgres_only
def test_postgres_pool_checks_a_connection_only_after_it_sat_idle(app, monkeypatch):
    """A connection back from the pool within VERIFY_IDLE_AFTER_S is reused unchecked; one that
    sat idle longer is checked, and dropped when the server closed it (a restart, say)."""
    import psycopg2

    database = db.database.obj
    checks: list[int] = []
    is_connection_closed = database._adapter.is_connection_closed

    def counted(conn):
        checks.append(1)
        return is_connection_closed(conn)

    monkeypatch.setattr(database._adapter, "is_connection_closed", counted)
    pid = database.execute_sql("SELECT pg_backend_pid()").fetchone()[0]
    database.close()
    database.connect()
    assert database.execute_sql("SELECT pg_backend_pid()").fetchone()[0] == pid
    assert checks == []  # reused at once, unchecked

    database.close()
    admin = psycopg2.connect(app.config["DATABASE_URL"])
    admin.autocommit = True
    admin.cursor().execute("SELECT pg_terminate_backend(%s)", (pid,))
    admin.close()
    monkeypatch.setattr(type(database), "VERIFY_IDLE_AFTER_S", 0.05)
    time.sleep(0.1)
    database.connect()
    assert checks == [1]
    assert database.execute_sql("SELECT pg_backend_pid()").fetchone()[0] != pid


@pytest.mark.parametrize(
    "text",
    [
        "{}",
        "[]",
        '["faq","booking"]',
        '{"a":{"b":[1,2.5,null,true,"\\u00fc"]}}',
        "12345678901234567890123",
        " [1] ",
        '"x"',
    ],
)
def test_json_column_reads_as_json_loads_does(text):
    assert JSONField().python_value(text) == json.loads(text)


@pytest.mark.parametrize("text", ["[1]x", "nul", "", '{"a":1'])
def test_json_column_that_is_not_json_raises_the_parser_error(text):
    with pytest.raises(json.JSONDecodeError):
        JSONField().python_value(text)
