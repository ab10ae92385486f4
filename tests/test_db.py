"""Storage: migrations from empty, SQLite settings, PostgreSQL when configured."""

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
