"""Database binding: one DatabaseProxy, SQLite or PostgreSQL from DATABASE_URL, migrations."""

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import peewee
from flask import Flask
from peewee_migrate import Router
from playhouse.db_url import connect, register_database
from playhouse.pool import PooledPostgresqlDatabase, PooledSqliteDatabase

from app.util import isoformat

database = peewee.DatabaseProxy()

MIGRATIONS_DIR = Path(__file__).parent / "migrations"

# busy_timeout first: switching to WAL needs the lock it waits for.
SQLITE_BUSY_TIMEOUT_MS = 10_000
SQLITE_PRAGMAS = (
    ("busy_timeout", SQLITE_BUSY_TIMEOUT_MS),
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

    @classmethod
    def find(cls, pk: Any) -> Any:
        """The row whose primary key is pk, or None.

        Fixed SQL read by model_rows: the services look rows up by id many times per request,
        and compiling peewee's SELECT of every column, or resolving its columns, each time cost
        more than running it.
        """
        table, column = cls._meta.table_name, cls._meta.primary_key.column_name  # type: ignore[union-attr]
        rows = model_rows(cls, f'SELECT * FROM "{table}" WHERE "{column}" = ?', [pk])
        return rows[0] if rows else None

    @classmethod
    def get_by_id(cls, pk: Any) -> Any:
        """peewee's get_by_id (DoesNotExist when absent), through find()."""
        row = cls.find(pk)
        if row is None:
            raise cls.DoesNotExist(f"{cls.__name__} {pk} does not exist.")  # type: ignore[attr-defined]
        return row


def resolve_url(url: str, project_root: str) -> str:
    """Make a relative SQLite path relative to the project folder, creating its directory."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and ":memory:" not in url:
        path = os.path.join(project_root, url[len(prefix) :])
        url = prefix + path
    if url.startswith(prefix) and ":memory:" not in url:
        Path(url[len(prefix) :].split("?")[0]).parent.mkdir(parents=True, exist_ok=True)
    return url


class SerializedSqliteDatabase(PooledSqliteDatabase):
    """Pooled SQLite whose write transactions queue on a lock instead of sleeping.

    SQLite has one writer at a time. A transaction that finds the write lock taken waits in
    SQLite's busy handler, which sleeps 1, 2, 5, 10 ... 100 ms between tries, so under load
    writers slept far longer than the transaction ahead of them took, and a machine running
    two gunicorn workers sat a quarter idle. Writers now queue before BEGIN:
    - threads of one process on a Python lock, which wakes the next one as soon as the
      holder commits;
    - processes (gunicorn workers, RQ workers, the CLI) on an flock of the file
      "<database>-writer" beside the database, tried every 0.05 ms at first and at most
      every 1 ms. The kernel drops it with a process that dies.
    The wait is bounded by busy_timeout, after which the transaction goes on to SQLite's own
    waiting. Where the lock file cannot be opened (another user's, a read-only folder),
    processes meet the busy handler as before.
    """

    LOCK_SUFFIX = "-writer"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._writer = threading.Lock()
        self._holder = threading.local()
        self._lock_file: int | None = None
        self._lock_pid = 0  # the process that opened _lock_file (a forked child reopens it)

    def begin(self, lock_type: str | None = None) -> None:
        deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
        self._holder.file = None
        self._holder.held = self._writer.acquire(timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
        try:
            if self._holder.held:
                self._holder.file = self._lock_across_processes(deadline)
            super().begin(lock_type)
        except BaseException:
            self._release()
            raise

    def commit(self) -> None:
        super().commit()  # when this fails, peewee rolls back, which releases
        self._release()

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            self._release()

    def _release(self) -> None:
        if getattr(self._holder, "held", False):
            self._holder.held = False
            if self._holder.file is not None:
                fcntl.flock(self._holder.file, fcntl.LOCK_UN)
                self._holder.file = None
            self._writer.release()

    def close_all(self) -> None:
        """Close every pooled connection and the lock file (reopened when a write needs it)."""
        super().close_all()
        if self._lock_file is not None and self._writer.acquire(blocking=False):
            try:
                if self._lock_pid == os.getpid():
                    os.close(self._lock_file)
                self._lock_file, self._lock_pid = None, 0
            finally:
                self._writer.release()

    def _lock_across_processes(self, deadline: float) -> int | None:
        """Take the lock file's flock by deadline; its descriptor, or None (not taken)."""
        lock_file = self._open_lock_file()
        if lock_file is None:
            return None
        delay = 0.00005
        while True:
            try:
                fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return lock_file
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return None
                time.sleep(delay)
                delay = min(delay * 2, 0.001)

    def _open_lock_file(self) -> int | None:
        if self._lock_pid != os.getpid():
            self._lock_pid = os.getpid()
            self._lock_file = None
            path = str(self.database)
            if path and path != ":memory:" and not path.startswith("file:"):
                try:
                    # Read-only is enough for flock, so any user who can read it can queue.
                    flags = os.O_RDONLY | os.O_CREAT
                    self._lock_file = os.open(path + self.LOCK_SUFFIX, flags, 0o644)
                except OSError as exc:
                    logging.getLogger(__name__).warning(
                        "SQLite writers of different processes will not queue: %s", exc
                    )
        return self._lock_file


register_database(SerializedSqliteDatabase, "sqlite+pool")


class PostgresqlDatabase(PooledPostgresqlDatabase):
    """Pooled PostgreSQL with two round trips fewer per request.

    Every round trip to the server costs both processes CPU, and a runtime request is a short
    transaction of three to five statements:
    - BEGIN is sent in front of the transaction's first statement, not on its own. A
      transaction that runs no statement sends nothing at all.
    - A connection handed back to the pool less than VERIFY_IDLE_AFTER_S ago is handed out
      again without the pool's "SELECT 1" check (as HikariCP's aliveBypassWindowMs does);
      one idle longer is still checked, so connections a server restart closed are dropped.
      The check also ran under the pool's lock, so threads of a process took turns at it.
    """

    VERIFY_IDLE_AFTER_S = 0.5

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._begin_pending = threading.local()
        self._returned_at: dict[int, float] = {}

    def _is_closed(self, conn: Any) -> bool:
        returned_at = self._returned_at.pop(id(conn), None)
        if (
            returned_at is not None
            and time.monotonic() - returned_at < self.VERIFY_IDLE_AFTER_S
            and not conn.closed
            and self._adapter.txn_status(conn) == self._adapter.txn_idle
        ):
            return False
        return super()._is_closed(conn)

    def begin(self, isolation_level: Any = None) -> None:
        if isolation_level or self._isolation_level:
            super().begin(isolation_level)
        else:
            self.connection()  # open it now, as BEGIN would: opening resets the transactions
            self._begin_pending.sql = "BEGIN;\n"

    def execute_sql(self, sql: str, params: Any = None) -> Any:
        return super().execute_sql(self._take_pending() + sql, params)

    def commit(self) -> None:
        if not self._take_pending():  # else nothing was sent: nothing to end
            super().commit()

    def rollback(self) -> None:
        if not self._take_pending():
            super().rollback()

    def _take_pending(self) -> str:
        """The BEGIN not sent yet ("" when none), forgotten from now on."""
        pending = getattr(self._begin_pending, "sql", "")
        self._begin_pending.sql = ""
        return pending

    def _close(self, conn: Any, close_conn: bool = False) -> None:
        self._take_pending()
        super()._close(conn, close_conn)
        if not close_conn and not conn.closed:  # back in the pool
            self._returned_at[id(conn)] = time.monotonic()


register_database(PostgresqlDatabase, "postgres+pool", "postgresql+pool")


def make_database(url: str) -> peewee.Database:
    """Open (lazily) a connection pool on the database named by url.

    Connections are pooled so a request does not pay for a new connection (and, on SQLite,
    the pragmas and WAL set-up) every time; closing one returns it to the pool.
    """
    scheme, sep, rest = url.partition("://")
    options: dict[str, Any] = {"max_connections": 32, "stale_timeout": 300}
    if scheme.startswith("sqlite"):
        # Write transactions take the write lock at BEGIN, so a transaction that reads and
        # then writes waits for busy_timeout instead of failing with "database is locked".
        options |= {"pragmas": SQLITE_PRAGMAS, "lock_type": "IMMEDIATE", "check_same_thread": False}
    if "+pool" not in scheme and ":memory:" not in rest:
        scheme += "+pool"
    return connect(scheme + sep + rest, **options)


def close_all(db: peewee.Database | None = None) -> None:
    """Close every pooled connection (before copying a SQLite file, or at exit)."""
    target = db or database.obj
    if hasattr(target, "close_all"):
        target.close_all()
    elif not target.is_closed():
        target.close()


def raw_sql(text: str) -> str:
    """SQL written with ? placeholders, in the bound database's parameter style.

    Hot read paths (authentication, list endpoints) use fixed SQL through Model.raw():
    compiling the same peewee query on every request cost more CPU than running it.
    """
    param = database.obj.param
    return text if param == "?" else text.replace("?", param)


# Fields whose database value is already the Python value (no conversion needed per row).
_PLAIN_FIELDS = (
    peewee.CharField,
    peewee.TextField,
    peewee.IntegerField,
    peewee.BigIntegerField,
    peewee.AutoField,
    peewee.ForeignKeyField,  # every key here is a CharField id
)


@cache
def column_converter(field: peewee.Field) -> Callable[[Any], Any] | None:
    """What turns a column's (non-null) database value into the field's Python value; None when
    they are the same. Times read as text (SQLite) go through datetime.fromisoformat, several
    times faster than peewee's format-by-format parsing, which stays the fallback.

    Worked out once per field: model_rows and select_rows ask for every column of every query.
    """
    if type(field) in _PLAIN_FIELDS:
        return None
    if isinstance(field, peewee.DateTimeField):
        fallback = field.python_value

        def to_datetime(value: Any) -> Any:
            if isinstance(value, str):
                try:
                    return datetime.fromisoformat(value)
                except ValueError:
                    pass
            return fallback(value)

        return to_datetime
    return field.python_value


class Rows(Sequence[SimpleNamespace]):
    """Rows of fixed SQL as the cursor gave them (tuples), with their column names and model.

    An item is a plain read-only object whose columns were converted by their model fields
    (times, JSON, booleans); a slice is Rows again. A schema can dump the tuples in one pass
    instead (app.resources.common.Schema), without those objects or the Python values its
    output would turn back into text.
    """

    __slots__ = ("model", "columns", "tuples")

    def __init__(self, model: type[peewee.Model], columns: Sequence[str], tuples: list[Any]):
        self.model, self.columns, self.tuples = model, tuple(columns), tuples

    def __len__(self) -> int:
        return len(self.tuples)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return Rows(self.model, self.columns, self.tuples[index])
        return self._item(self.tuples[index])

    def __iter__(self) -> Iterator[SimpleNamespace]:
        return map(self._item, self.tuples)

    def _item(self, row: Sequence[Any]) -> SimpleNamespace:
        fields = self.model._meta.columns  # type: ignore[attr-defined]
        return SimpleNamespace(
            **{
                name: value if value is None or convert is None else convert(value)
                for name, value in zip(self.columns, row, strict=True)
                for convert in [column_converter(fields[name])]
            }
        )


def select_rows(model: type[peewee.Model], sql: str, params: Sequence[Any]) -> Rows:
    """Rows of fixed SQL (? placeholders, columns of model's table), for list endpoints
    that only read: several times cheaper than model instances."""
    cursor = database.execute_sql(raw_sql(sql), params)
    return Rows(model, [column[0] for column in cursor.description], cursor.fetchall())


def timestamp_text(field: peewee.DateTimeField) -> Callable[[Any], str | None]:
    """What turns field's database value into util.isoformat's text (…T09:15:02.120Z).

    SQLite hands back the text its adapter stored (datetime.isoformat(" ")); the two forms
    of a naive time are rewritten as text, without building a datetime. Any other value (a
    datetime from PostgreSQL, text with an offset) is converted by the field first.
    """
    to_datetime = column_converter(field)

    def text(value: Any) -> str | None:
        if type(value) is str:
            if len(value) == 26 and value[10] == " " and value[19] == ".":
                return value[:10] + "T" + value[11:23] + "Z"
            if len(value) == 19 and value[10] == " ":
                return value[:10] + "T" + value[11:] + ".000Z"
        if value is not None and to_datetime is not None:
            value = to_datetime(value)
        return isoformat(value)

    return text


# Per model and column names of a query: each column's model field (None for an alias) and
# converter. Queries are fixed SQL, so this holds one entry per query shape.
_column_plans: dict[tuple[type[peewee.Model], tuple[str, ...]], list[tuple[Any, ...]]] = {}


def model_rows(model: type[peewee.Model], sql: str, params: Sequence[Any]) -> list[Any]:
    """Rows of fixed SQL (? placeholders) as model instances: columns of model's table become
    its fields, any other column (an alias from a join) a plain attribute, as raw() does.

    Like model.raw(), for statements that return rows (SELECT, UPDATE ... RETURNING), but
    without peewee resolving the columns on every query, which cost more than the query.
    """
    cursor = database.execute_sql(raw_sql(sql), params)
    names = tuple(column[0] for column in cursor.description)
    columns = _column_plans.get((model, names))
    if columns is None:
        fields = model._meta.columns  # type: ignore[attr-defined]
        columns = _column_plans[model, names] = [
            (name, field, field and column_converter(field))
            for name in names
            for field in [fields.get(name)]
        ]
    rows = []
    for row in cursor:
        instance = model(__no_default__=1)
        data = instance.__data__
        for (name, field, convert), value in zip(columns, row, strict=True):
            if field is None:
                setattr(instance, name, value)
            else:
                data[field.name] = value if convert is None or value is None else convert(value)
        rows.append(instance)
    return rows


def insert_rows(rows: Sequence[peewee.Model], *, skip_existing: bool = False) -> int:
    """INSERT new instances of one model in one statement of fixed SQL; the rows inserted.

    Build each instance with the model's constructor (so its defaults are filled) and the same
    fields given; each column is converted by its field, as Model.create does. For hot write
    paths: compiling peewee's INSERT cost more CPU than running it. skip_existing: a row whose
    key is taken already is left out (ON CONFLICT DO NOTHING) instead of failing.
    """
    if not rows:
        return 0
    sql, params = insert_statement(rows, skip_existing=skip_existing)
    return int(database.execute_sql(raw_sql(sql), params).rowcount)


def insert_statement(
    rows: Sequence[peewee.Model], *, skip_existing: bool = False
) -> tuple[str, list[Any]]:
    """insert_rows' statement (? placeholders) and its parameters, for a caller that sends it
    as part of a larger statement."""
    table, fields, columns = _insert_target(rows[0])
    values = ", ".join(["(" + ", ".join("?" * len(fields)) + ")"] * len(rows))
    params = [field.db_value(row.__data__[field.name]) for row in rows for field in fields]
    conflict = " ON CONFLICT DO NOTHING" if skip_existing else ""
    return f'INSERT INTO "{table}" ({columns}) VALUES {values}{conflict}', params


def insert_select_statement(
    row: peewee.Model, source: str, computed: dict[str, str]
) -> tuple[str, list[Any]]:
    """row's INSERT as INSERT ... SELECT ... FROM source (? placeholders) and its parameters,
    for a caller that sends it with the statement that defines source (a WITH part). Nothing
    is inserted when source gives no row. computed: fields whose value is an SQL expression
    on source's columns instead of row's value."""
    table, fields, columns = _insert_target(row)
    values = ", ".join(computed.get(field.name, "?") for field in fields)
    data = row.__data__
    params = [field.db_value(data[field.name]) for field in fields if field.name not in computed]
    return f'INSERT INTO "{table}" ({columns}) SELECT {values} FROM {source}', params


def _insert_target(row: peewee.Model) -> tuple[str, list[peewee.Field], str]:
    """The table, fields given and column list of row's INSERT."""
    meta = type(row)._meta  # type: ignore[attr-defined]
    fields = [meta.fields[name] for name in row.__data__]
    return meta.table_name, fields, ", ".join(f'"{field.column_name}"' for field in fields)


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
