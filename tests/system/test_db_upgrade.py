"""`flask db upgrade` started by several hosts at once on an empty database."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from playhouse.db_url import connect

from app import db
from tests.conftest import TEST_DATABASE_URL, using_postgres

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = [path.stem for path in sorted(db.MIGRATIONS_DIR.glob("[0-9][0-9][0-9]_*.py"))]


@pytest.fixture
def empty_database_url(tmp_path):
    """A database with no tables: a new SQLite file, or a new PostgreSQL database."""
    if not using_postgres():
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    name = f"va_empty_{uuid.uuid4().hex[:12]}"
    admin = connect(TEST_DATABASE_URL)
    admin.execute_sql(f'CREATE DATABASE "{name}"')
    yield TEST_DATABASE_URL.rsplit("/", 1)[0] + "/" + name
    admin.execute_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


def test_hosts_upgrading_an_empty_database_at_once_apply_each_migration_once(
    empty_database_url,
):
    """Three `flask db upgrade` started together, as three hosts' web units do: one applies
    the migrations while the others wait for it, then find nothing left to do."""
    env = {**os.environ, "DATABASE_URL": empty_database_url, "FLASK_APP": "wsgi"}
    env.pop("REDIS_URL", None)
    processes = [
        subprocess.Popen(
            [str(Path(sys.executable).parent / "flask"), "db", "upgrade"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [process.communicate(timeout=120)[0] for process in processes]
    report = "\n---\n".join(outputs)
    assert [process.returncode for process in processes] == [0, 0, 0], report
    assert "Traceback" not in report
    applied = [out for out in outputs if f"Applied {', '.join(MIGRATIONS)}." in out]
    assert len(applied) == 1, report
    assert sum("The schema is up to date." in out for out in outputs) == 2, report
    database = connect(empty_database_url)
    names = [row[0] for row in database.execute_sql("SELECT name FROM migratehistory ORDER BY id")]
    database.close()
    assert names == MIGRATIONS
