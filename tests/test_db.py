"""Storage: migrations from empty, SQLite settings, PostgreSQL when configured."""

import fcntl
import json
import os
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import peewee
import pytest
from playhouse.db_url import connect

from app import db
from app.models import ALL_MODELS, AgentVersion, FunctionDefinition, JSONField
from tests.conftest import TEST_DATABASE_URL, using_postgres


def test_migrations_create_every_table_from_empty(tmp_path):
    database = db.make_database(f"sqlite:///{tmp_path / 'empty.db'}")
    applied = db.upgrade(database)
    assert applied[:3] == ["001_initial", "002_delivery_job_id", "003_credit_reservation"]
    # Every migration file, once, in the order of their numbers.
    files = sorted(
        path.stem for path in Path(db.__file__).parent.joinpath("migrations").glob("0*.py")
    )
    assert applied == files
    tables = set(database.get_tables())
    assert {model._meta.table_name for model in ALL_MODELS} <= tables
    for model in ALL_MODELS:
        table = model._meta.table_name
        columns = {column.name for column in database.get_columns(table)}
        assert {field.column_name for field in model._meta.sorted_fields} == columns, table
        indexed = {tuple(index.columns) for index in database.get_indexes(table)}
        for fields, _unique in model._meta.indexes:
            columns = tuple(model._meta.fields[name].column_name for name in fields)
            assert columns in indexed, (table, columns)
    assert db.upgrade(database) == []
    database.close()


def test_the_call_id_migration_fills_in_the_events_already_kept(tmp_path):
    database = db.make_database(f"sqlite:///{tmp_path / 'kept.db'}")
    router = db.migration_router(database)
    router.run("005_users")
    database.execute_sql(
        "INSERT INTO tenant (id, name, plan, low_balance_threshold, balance_minutes, "
        "lifetime_purchased_minutes, lifetime_used_minutes, reserved_minutes, calls_count, "
        "created_at) VALUES ('ten_1', 'acme', 'starter', 10, 0, 0, 0, 0, 0, '2026-01-01')"
    )
    kept = [
        ("evt_1", "call.started", '{"callId":"call_1","did":"+6221555010"}'),
        ("evt_2", "function.called", '{"callId":"call_1","functionName":"f"}'),
        ("evt_3", "call.ended", '{"callId":"call_2"}'),
        ("evt_4", "credits.low", '{"balanceMinutes":3,"threshold":10}'),
    ]
    for event_id, type, data in kept:
        database.execute_sql(
            "INSERT INTO event (id, tenant_id, type, data, created_at) "
            "VALUES (?, 'ten_1', ?, ?, '2026-01-01')",
            (event_id, type, data),
        )
    assert db.migration_router(database).run("006_event_call_id") == ["006_event_call_id"]
    rows = database.execute_sql("SELECT id, call_id FROM event ORDER BY id").fetchall()
    assert rows == [("evt_1", "call_1"), ("evt_2", "call_1"), ("evt_3", "call_2"), ("evt_4", None)]
    database.close()


def test_migrations_that_rebuild_a_sqlite_table_keep_the_rows_that_refer_to_it(tmp_path):
    """003 adds a NOT NULL column to tenant, which SQLite does by copying the table and
    dropping the old one: with foreign keys on, that dropped every tenant's keys."""
    database = db.make_database(f"sqlite:///{tmp_path / 'old.db'}")
    db.migration_router(database).run("002_delivery_job_id")
    database.execute_sql(
        "INSERT INTO tenant (id, name, plan, low_balance_threshold, balance_minutes, "
        "lifetime_purchased_minutes, lifetime_used_minutes, calls_count, created_at) "
        "VALUES ('ten_1', 'acme', 'starter', 10, 0, 0, 0, 0, '2026-01-01')"
    )
    database.execute_sql(
        "INSERT INTO api_key (id, tenant_id, name, prefix, key_hash, created_at) "
        "VALUES ('key_1', 'ten_1', 'main', 'dkl_abc', 'hash', '2026-01-01')"
    )
    assert db.upgrade(database)[0] == "003_credit_reservation"
    assert database.execute_sql("SELECT id, tenant_id, scope FROM api_key").fetchall() == [
        ("key_1", "ten_1", "full")
    ]
    assert database.execute_sql("PRAGMA foreign_keys").fetchone() == (1,)
    db.close_all(database)


@contextmanager
def empty_database(tmp_path):
    """An empty database of the run's kind: a SQLite file, or a PostgreSQL database of its
    own (dropped after)."""
    if not using_postgres():
        database = db.make_database(f"sqlite:///{tmp_path / 'empty.db'}")
        yield database
        db.close_all(database)
        return
    name = f"va_empty_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = connect(TEST_DATABASE_URL)
    admin.execute_sql(f'CREATE DATABASE "{name}"')
    database = db.make_database(TEST_DATABASE_URL.rsplit("/", 1)[0] + "/" + name)
    try:
        yield database
    finally:
        db.close_all(database)
        admin.execute_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


FUNCTION_COLUMNS = (
    "id, tenant_id, agent_id, name, description, endpoint, method, parameters, signing_secret, "
    "created_at, updated_at"
)


def insert_function(database, function_id: str) -> None:
    """A function row as the code before timeoutMs wrote it (no timeout_ms column named)."""
    database.execute_sql(
        f"INSERT INTO function ({FUNCTION_COLUMNS}) VALUES "
        f"('{function_id}', 'ten_1', 'agent_1', '{function_id}', 'd', 'https://x.example/f', "
        "'POST', '{}', 'secret', '2026-01-01', '2026-01-01')"
    )


def test_function_timeouts_default_to_5000_ms_before_and_after_the_migration(tmp_path):
    """Functions kept from before get 5000, and so does a row written by code from before
    (a host not yet updated): the default is the database's own."""
    with empty_database(tmp_path) as database:
        db.migration_router(database).run("006_event_call_id")
        database.execute_sql(
            "INSERT INTO tenant (id, name, plan, low_balance_threshold, balance_minutes, "
            "lifetime_purchased_minutes, lifetime_used_minutes, reserved_minutes, calls_count, "
            "created_at) VALUES ('ten_1', 'acme', 'starter', 10, 0, 0, 0, 0, 0, '2026-01-01')"
        )
        database.execute_sql(
            "INSERT INTO agent (id, tenant_id, name, system_prompt, voice_id, greeting_text, "
            "language, max_call_duration_minutes, tools_enabled, is_active, created_at, "
            "updated_at) VALUES ('agent_1', 'ten_1', 'A', 'p', 'Puck', '', 'id', 10, '[]', "
            "true, '2026-01-01', '2026-01-01')"
        )
        insert_function(database, "fn_kept")
        assert db.migration_router(database).run("009_function_timeout")[-1] == (
            "009_function_timeout"
        )
        insert_function(database, "fn_old_code")
        rows = database.execute_sql("SELECT id, timeout_ms FROM function ORDER BY id").fetchall()
        assert [tuple(row) for row in rows] == [("fn_kept", 5000), ("fn_old_code", 5000)]


def version_entries(name: str, endpoint: str) -> list[dict]:
    return [
        {
            "id": f"fn_{name}",
            "name": name,
            "description": "Looks it up.",
            "endpoint": endpoint,
            "method": "POST",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string", "description": "é", "enum": ["a"]}},
                "required": [],
            },
            "timeout_ms": 5000,
        }
    ]


def test_the_definitions_migration_stores_each_definition_once_and_reads_versions_the_same(
    tmp_path,
):
    """Versions written with a copy of every definition: after the migration they hold
    digests, a definition shared by versions is stored once, and each version reads back what
    it held; the rollback puts the copies back."""
    kept = {
        1: [],
        2: version_entries("lookup", "https://crm.example.com/a"),
        3: version_entries("lookup", "https://crm.example.com/a"),  # a name change only
        4: version_entries("lookup", "https://crm.example.com/b")
        + version_entries("zeta", "https://crm.example.com/z"),
    }
    with empty_database(tmp_path) as database:
        db.migration_router(database).run("018_outbound_calls_and_campaigns")
        database.execute_sql(
            "INSERT INTO tenant (id, name, plan, low_balance_threshold, balance_minutes, "
            "lifetime_purchased_minutes, lifetime_used_minutes, reserved_minutes, calls_count, "
            "created_at) VALUES ('ten_1', 'acme', 'starter', 10, 0, 0, 0, 0, 0, '2026-01-01')"
        )
        database.execute_sql(
            "INSERT INTO agent (id, tenant_id, name, system_prompt, voice_id, greeting_text, "
            "language, max_call_duration_minutes, tools_enabled, is_active, created_at, "
            "updated_at, version) VALUES ('agent_1', 'ten_1', 'A', 'p', 'Puck', '', 'id', 10, "
            "'[]', true, '2026-01-01', '2026-01-01', 4)"
        )
        for version, entries in kept.items():
            database.execute_sql(
                "INSERT INTO agent_version (agent_id, version, name, system_prompt, voice_id, "
                "greeting_text, language, max_call_duration_minutes, tools_enabled, functions, "
                "changes, actor_type, actor_label, created_at) VALUES ('agent_1', %s, 'A', 'p', "
                "'Puck', '', 'id', 10, '[]', %s, '[]', 'system', 'System', '2026-01-01')".replace(
                    "%s", database.param
                ),
                (version, json.dumps(entries, separators=(",", ":"), ensure_ascii=False)),
            )
        db.migration_router(database).run("020_function_definitions")
        with database.bind_ctx([AgentVersion, FunctionDefinition]):
            assert FunctionDefinition.select().count() == 3
            for version, entries in kept.items():
                # The columns of 020's version only (later migrations add more).
                read = (
                    AgentVersion.select(
                        AgentVersion.agent, AgentVersion.version, AgentVersion.function_digests
                    )
                    .where((AgentVersion.agent == "agent_1") & (AgentVersion.version == version))
                    .get()
                )
                assert len(read.function_digests) == len(entries)
                assert read.functions == entries
        db.migration_router(database).rollback()  # 020
        rows = database.execute_sql(
            "SELECT version, functions FROM agent_version ORDER BY version"
        ).fetchall()
        assert {version: json.loads(text) for version, text in rows} == kept


def test_the_seq_migration_numbers_each_tenants_kept_events_in_order(tmp_path):
    """Oldest first (ties by id), from 1 per tenant; the counter continues from the last;
    the deliveries of those events are all kept."""
    with empty_database(tmp_path) as database:
        db.migration_router(database).run("006_event_call_id")
        for tenant_id in ("ten_1", "ten_2", "ten_3"):
            database.execute_sql(
                "INSERT INTO tenant (id, name, plan, low_balance_threshold, balance_minutes, "
                "lifetime_purchased_minutes, lifetime_used_minutes, reserved_minutes, calls_count, "
                f"created_at) VALUES ('{tenant_id}', '{tenant_id}', 'starter', 10, 0, 0, 0, 0, 0, "
                "'2026-01-01')"
            )
        kept = [
            ("evt_b", "ten_1", "2026-01-01 00:00:01"),
            ("evt_a", "ten_1", "2026-01-01 00:00:01"),
            ("evt_c", "ten_1", "2026-01-01 00:00:00.500000"),
            ("evt_d", "ten_2", "2026-01-02 00:00:00"),
            ("evt_e", "ten_1", "2026-01-03 00:00:00"),
        ]
        for event_id, tenant_id, created_at in kept:
            database.execute_sql(
                "INSERT INTO event (id, tenant_id, type, data, created_at) VALUES "
                f"('{event_id}', '{tenant_id}', 'call.ended', '{{}}', '{created_at}')"
            )
        database.execute_sql(
            "INSERT INTO webhook (id, tenant_id, url, events, secret, is_active, created_at, "
            "updated_at) VALUES ('wh_1', 'ten_1', 'https://x.example', '[]', 's', true, "
            "'2026-01-01', '2026-01-01')"
        )
        for number, event_id in enumerate(("evt_a", "evt_d")):
            database.execute_sql(
                "INSERT INTO delivery (id, tenant_id, webhook_id, event_id, status, attempts, "
                f"created_at, updated_at) VALUES ('dlv_{number}', 'ten_1', 'wh_1', '{event_id}', "
                "'pending', 0, '2026-01-01', '2026-01-01')"
            )

        assert db.migration_router(database).run("007_event_seq") == ["007_event_seq"]
        rows = database.execute_sql("SELECT tenant_id, id, seq FROM event ORDER BY tenant_id, seq")
        assert rows.fetchall() == [
            ("ten_1", "evt_c", 1),
            ("ten_1", "evt_a", 2),
            ("ten_1", "evt_b", 3),
            ("ten_1", "evt_e", 4),
            ("ten_2", "evt_d", 1),
        ]
        counters = database.execute_sql("SELECT id, event_seq FROM tenant ORDER BY id").fetchall()
        assert counters == [("ten_1", 4), ("ten_2", 1), ("ten_3", 0)]
        assert database.execute_sql("SELECT count(*) FROM delivery").fetchone() == (2,)
        with pytest.raises(peewee.IntegrityError):  # one seq per tenant
            database.execute_sql(
                "INSERT INTO event (id, tenant_id, type, data, created_at, seq) VALUES "
                "('evt_f', 'ten_2', 'call.ended', '{}', '2026-01-04', 1)"
            )


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
def test_sqlite_transactions_take_the_write_lock_at_begin(tmp_path):
    """A transaction that reads first cannot find the database written by another process
    before it writes: its BEGIN took the lock, and others wait for it (busy_timeout)."""
    path = tmp_path / "x.db"
    database = db.make_database(f"sqlite:///{path}")
    database.execute_sql("CREATE TABLE t (n INTEGER)")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with database.atomic():
            database.execute_sql("SELECT count(*) FROM t")  # reads only, so far
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("INSERT INTO t VALUES (1)")
        other.execute("INSERT INTO t VALUES (1)")  # free again after the commit
    finally:
        other.close()
        db.close_all(database)


@pytest.mark.postgres_only
def test_postgres_pool_replaces_a_connection_the_server_closed(app):
    """A pooled connection that a server restart closed is dropped when it is handed out."""
    import psycopg2

    database = db.database.obj
    pid = database.execute_sql("SELECT pg_backend_pid()").fetchone()[0]
    database.close()  # back to the pool
    admin = psycopg2.connect(app.config["DATABASE_URL"])
    admin.autocommit = True
    admin.cursor().execute("SELECT pg_terminate_backend(%s)", (pid,))
    admin.close()
    time.sleep(0.1)
    database.connect()
    assert database.execute_sql("SELECT pg_backend_pid()").fetchone()[0] != pid


@pytest.mark.parametrize("value", [{}, [], ["faq", "booking"], {"a": {"b": [1, 2.5, None, "ü"]}}])
def test_json_column_stores_compact_text_and_reads_it_back(value):
    stored = JSONField().db_value(value)
    assert " " not in stored and JSONField().python_value(stored) == value


MIGRATIONS = [path.stem for path in sorted(db.MIGRATIONS_DIR.glob("[0-9][0-9][0-9]_*.py"))]


CALL_COLUMNS = (
    "id, tenant_id, caller_number, callee_number, direction, status, started_at, metadata, "
    "function_calls_count, reserved_minutes, reservation_expires_at, updated_at"
)


def insert_call(database, call_id: str, tenant_id: str, status: str, holds: bool) -> None:
    """A call row as the code before migration 010 wrote it."""
    expires = "'2026-01-01 00:25:00'" if holds else "NULL"
    database.execute_sql(
        f"INSERT INTO call ({CALL_COLUMNS}) VALUES ('{call_id}', '{tenant_id}', '+62811', "
        f"'+62215', 'inbound', '{status}', '2026-01-01', '{{}}', 0, {10 if holds else 0}, "
        f"{expires}, '2026-01-01')"
    )


def test_the_limits_migration_counts_each_tenants_calls_holding_credit(tmp_path):
    """The calls admitted and not ended (their hold stands) are each tenant's calls in
    progress; a row written by code from before gets the new columns' defaults."""
    with empty_database(tmp_path) as database:
        db.migration_router(database).run("009_function_timeout")
        for tenant_id in ("ten_1", "ten_2"):
            database.execute_sql(
                "INSERT INTO tenant (id, name, plan, low_balance_threshold, balance_minutes, "
                "lifetime_purchased_minutes, lifetime_used_minutes, reserved_minutes, calls_count, "
                f"created_at, event_seq) VALUES ('{tenant_id}', '{tenant_id}', 'starter', 10, 0, "
                "0, 0, 0, 0, '2026-01-01', 0)"
            )
        insert_call(database, "call_1", "ten_1", "ringing", holds=True)
        insert_call(database, "call_2", "ten_1", "answered", holds=True)
        insert_call(database, "call_3", "ten_1", "ringing", holds=False)  # its hold lapsed
        insert_call(database, "call_4", "ten_1", "ended", holds=False)
        insert_call(database, "call_5", "ten_2", "failed", holds=False)
        assert db.migration_router(database).run("010_call_limits_and_turns") == [
            "010_call_limits_and_turns"
        ]
        rows = database.execute_sql(
            "SELECT id, active_calls, concurrent_call_limit FROM tenant ORDER BY id"
        ).fetchall()
        assert [tuple(row) for row in rows] == [("ten_1", 2, None), ("ten_2", 0, None)]
        insert_call(database, "call_6", "ten_2", "ringing", holds=True)
        rows = database.execute_sql(
            "SELECT variables, turns_count, turns_bytes, recording_url, cost_llm_idr FROM call "
            "WHERE id IN ('call_1', 'call_6')"
        ).fetchall()
        assert [tuple(row) for row in rows] == [("{}", 0, 0, None, None)] * 2


def test_the_due_at_migration_makes_kept_campaigns_due_and_keeps_their_contacts(tmp_path):
    """019 adds campaign.due_at NOT NULL (SQLite copies the table): a campaign kept from before
    is due from its last change, and its contacts, which refer to it, stay."""
    with empty_database(tmp_path) as database:
        db.migration_router(database).run("018_outbound_calls_and_campaigns")
        database.execute_sql(
            "INSERT INTO tenant (id, name, plan, low_balance_threshold, balance_minutes, "
            "lifetime_purchased_minutes, lifetime_used_minutes, reserved_minutes, calls_count, "
            "created_at, event_seq, active_calls) VALUES ('ten_1', 'acme', 'starter', 10, 0, "
            "0, 0, 0, 0, '2026-01-01', 0, 0)"
        )
        database.execute_sql(
            "INSERT INTO campaign (id, tenant_id, name, status, max_concurrent_calls, "
            "max_attempts, retry_delay_minutes, retry_on, total_count, pending_count, "
            "in_progress_count, completed_count, failed_count, created_at, updated_at) VALUES "
            "('cmp_1', 'ten_1', 'Survey', 'running', 1, 1, 60, '[]', 1, 1, 0, 0, 0, "
            "'2026-01-01 00:00:00', '2026-01-02 00:00:00')"
        )
        database.execute_sql(
            "INSERT INTO campaign_contact (id, campaign_id, seq, to_number, variables, status, "
            "attempts, updated_at) VALUES ('cct_1', 'cmp_1', 1, '+6281200000000', '{}', "
            "'pending', 0, '2026-01-01 00:00:00')"
        )
        assert db.upgrade(database)[0] == "019_campaign_due_at"
        (due_at,) = database.execute_sql("SELECT due_at FROM campaign").fetchone()
        assert str(due_at) == "2026-01-02 00:00:00"
        assert database.execute_sql("SELECT id FROM campaign_contact").fetchall() == [("cct_1",)]


def _writer_lock_is_free(database: peewee.Database) -> bool:
    """Whether another writer could queue_for_writing now (a fresh flock on the lock file)."""
    fd = os.open(f"{database.database}-writer", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


@pytest.mark.sqlite_only
def test_sqlite_writers_queue_on_a_file_lock_and_leave_it_at_commit_or_rollback(app):
    """A transaction on SQLite first waits for the file lock beside the database (the kernel
    wakes it when the holder lets go, where SQLite's busy handler sleeps between tries); it
    lets go once COMMIT is done, before the work registered for after the commit, and at a
    rollback."""
    database = db.database.obj
    holder = os.open(f"{database.database}-writer", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another process's writer, as far as flock can tell
    done = threading.Event()

    def write() -> None:
        with app.app_context(), db.transaction():
            database.execute_sql("CREATE TABLE queued (n INTEGER)")
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        # Waiting on the file lock, not on SQLite's: the database itself is free to write.
        assert not done.wait(0.3)
        other = sqlite3.connect(database.database, timeout=0, isolation_level=None)
        other.execute("CREATE TABLE meanwhile (n INTEGER)")
        other.close()
    finally:
        os.close(holder)  # lets the lock go
    writer.join(5)
    assert done.is_set() and "queued" in database.get_tables()

    seen_after_commit = []
    with db.transaction():
        assert not _writer_lock_is_free(database)
        with db.transaction():  # a savepoint: the same place in the queue
            database.execute_sql("INSERT INTO queued VALUES (1)")
        database.after_commit(lambda: seen_after_commit.append(_writer_lock_is_free(database)))
    assert seen_after_commit == [True]

    with pytest.raises(RuntimeError), db.transaction():
        database.execute_sql("INSERT INTO queued VALUES (2)")
        raise RuntimeError("rolled back")
    assert _writer_lock_is_free(database)
    assert database.execute_sql("SELECT n FROM queued").fetchall() == [(1,)]


@pytest.mark.sqlite_only
def test_a_held_unit_of_work_keeps_its_place_until_the_caller_ends_it(app):
    database = db.database.obj
    database.execute_sql("CREATE TABLE held (n INTEGER)")
    for commit, rows in ((False, []), (True, [(1,)])):
        token = db.hold_unit_of_work()
        with db.unit_of_work():
            database.execute_sql("INSERT INTO held VALUES (1)")
        assert db.release_unit_of_work(token)
        assert not _writer_lock_is_free(database)  # still open: the caller's answer goes in
        db.end_held_unit(commit=commit)
        assert _writer_lock_is_free(database)
        assert database.execute_sql("SELECT n FROM held").fetchall() == rows


def test_the_analysis_migration_gives_kept_agents_the_default_plan_and_rolls_back(tmp_path):
    """Agents and versions from before 022 get the default plan; the rollback removes the
    plan and the call's analysis columns again."""
    with empty_database(tmp_path) as database:
        db.migration_router(database).run("021_whatsapp_accounts")
        database.execute_sql(
            "INSERT INTO tenant (id, name, plan, low_balance_threshold, balance_minutes, "
            "lifetime_purchased_minutes, lifetime_used_minutes, reserved_minutes, calls_count, "
            "created_at) VALUES ('ten_1', 'acme', 'starter', 10, 0, 0, 0, 0, 0, '2026-01-01')"
        )
        database.execute_sql(
            "INSERT INTO agent (id, tenant_id, name, system_prompt, voice_id, greeting_text, "
            "language, max_call_duration_minutes, tools_enabled, is_active, created_at, "
            "updated_at, version) VALUES ('agent_1', 'ten_1', 'A', 'p', 'Puck', '', 'id', 10, "
            "'[]', true, '2026-01-01', '2026-01-01', 1)"
        )
        db.migration_router(database).run()
        [(plan,)] = database.execute_sql("SELECT analysis_plan FROM agent").fetchall()
        assert json.loads(plan) == {"summary": True, "fields": []}
        columns = {column.name for column in database.get_columns("call")}
        assert {
            "analysis",
            "analysis_status",
            "successful",
            "analysis_cost_idr",
            "analysis_requested_at",
        } <= columns
        db.migration_router(database).rollback()  # 022
        columns = {column.name for column in database.get_columns("call")}
        assert not {"analysis", "analysis_status", "successful", "analysis_requested_at"} & columns
        assert "analysis_plan" not in {c.name for c in database.get_columns("agent_version")}
        assert "analysis_plan" not in {c.name for c in database.get_columns("agent")}
