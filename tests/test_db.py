"""Storage: migrations from empty, SQLite settings, PostgreSQL when configured."""

import threading
import time

import peewee
import pytest

from app import db
from app.models import ALL_MODELS
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
