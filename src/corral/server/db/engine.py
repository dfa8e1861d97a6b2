"""Database engine, sessions and migrations.

``sqlite:///path`` (the default) and ``postgresql://...`` URLs are accepted; the schema is
always created and upgraded by Alembic (``migrations/``), never by ``create_all``.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker

from corral.errors import ValidationError
from corral.server.home import secure_sqlite_file

MIGRATIONS = Path(__file__).with_name("migrations")
MIGRATION_LOCK_KEY = 0x636F7272616C  # "corral": the advisory lock replicas migrate under


def normalize_url(url: str) -> str:
    """Accept ``postgresql://`` as psycopg 3 and ``sqlite:///~/x.db`` with ``~``."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        if path.startswith("~"):
            return "sqlite:///" + str(Path(path).expanduser())
    return url


def make_engine(url: str) -> Engine:
    url = normalize_url(url)
    if url.startswith("sqlite"):
        path = make_url(url).database
        file = path if path and path != ":memory:" and not path.startswith("file:") else None
        if file:
            Path(file).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, pool_size=8
        )

        @event.listens_for(engine, "do_connect")
        def _private(*_args: object) -> None:
            if file:  # mode 0600 (and its -wal, -shm): it holds token hashes and keys
                secure_sqlite_file(Path(file))

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record) -> None:  # noqa: ANN001
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        WriteGate().install(engine)
        return engine
    if url.startswith("postgresql+psycopg") and importlib.util.find_spec("psycopg") is None:
        raise ValidationError(
            "--db: PostgreSQL needs the psycopg driver: pip install 'corral[postgres]'"
        )
    # No pool_pre_ping: it costs a round trip per checkout (two per API call). A connection
    # that died with the server instead fails its first statement, the request is answered
    # 503 (``server/errors.py``) and SQLAlchemy discards the whole pool, so a restarted
    # PostgreSQL costs at most one failed call per process, not one per pooled connection.
    return create_engine(url, pool_size=10, max_overflow=20)


class WriteGate:
    """One SQLite write transaction at a time in this process, in arrival order.

    SQLite admits one writer; the others retry in its busy handler, which sleeps in steps
    of up to 100 ms, so under concurrent writes most of a submission's latency was sleep.
    The gate is taken at a transaction's first write statement (pysqlite begins the
    transaction there too) and given back at its commit or rollback, or when the connection
    returns to the pool; waiters wake as soon as it is free. A thread already inside the
    gate on another connection passes (SQLite arbitrates, as before), and a waiter gives
    up after the busy timeout and goes on ungated. Other processes are not gated."""

    TIMEOUT = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None

    @property
    def held(self) -> bool:
        return self._lock.locked()

    def install(self, engine: Engine) -> None:
        event.listen(engine, "before_cursor_execute", self._before_execute)
        for name in ("commit", "rollback"):
            event.listen(engine, name, self._leave_connection)
        event.listen(engine.pool, "reset", self._on_reset)
        event.listen(engine.pool, "invalidate", self._on_reset)
        event.listen(engine.pool, "checkin", self._on_checkin)
        event.listen(engine.pool, "close", self._on_checkin)

    def _before_execute(self, conn, _cursor, statement, *_args) -> None:  # noqa: ANN001
        if conn.info.get(_GATE) or statement.lstrip()[:6].upper() not in _WRITES:
            return
        me = threading.get_ident()
        if self._owner == me or not self._lock.acquire(timeout=self.TIMEOUT):
            return
        self._owner = me
        conn.info[_GATE] = True

    def _leave_connection(self, conn) -> None:  # noqa: ANN001
        self._leave(conn.info)

    def _on_reset(self, dbapi_connection, connection_record, reset_state) -> None:  # noqa: ANN001, ARG002
        self._on_checkin(dbapi_connection, connection_record)

    def _on_checkin(self, dbapi_connection, connection_record) -> None:  # noqa: ANN001, ARG002
        if connection_record is not None:
            self._leave(connection_record.info)

    def _leave(self, info: dict) -> None:
        if info.pop(_GATE, False):
            self._owner = None
            self._lock.release()


_GATE = "corral.write_gate"
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLAC")


def migrate(engine: Engine, revision: str = "head") -> None:
    """Upgrade the database to ``revision``, the newest schema by default, all or nothing
    (idempotent; replicas starting together take turns: a PostgreSQL advisory lock, or a
    lock file beside a SQLite database).

    On SQLite the upgrade runs in one explicit transaction (the driver would otherwise
    commit each schema statement on its own, and a failed upgrade would leave half a
    schema), with foreign keys off: altering a table there means copying it into a new
    one and dropping the old, which a table that other rows refer to would refuse
    (Alembic's batch mode). The references are checked before the commit."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with _migration_lock(engine), engine.connect() as connection:
        if connection.dialect.name != "sqlite":
            with connection.begin():
                lock = f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"
                connection.exec_driver_sql(lock)
                config.attributes["connection"] = connection
                command.upgrade(config, revision)
            return
        driver = connection.connection.driver_connection
        assert driver is not None
        legacy = driver.isolation_level
        driver.isolation_level = None  # the driver begins nothing; BEGIN below does
        try:
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")  # no-op in a transaction
            connection.commit()
            with connection.begin():
                connection.exec_driver_sql("BEGIN")
                config.attributes["connection"] = connection
                command.upgrade(config, revision)
                if connection.exec_driver_sql("PRAGMA foreign_key_check").first():
                    raise RuntimeError("the schema upgrade left rows with broken references")
        finally:
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")
            connection.commit()
            driver.isolation_level = legacy


@contextlib.contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    """An exclusive lock on ``<database>.migrate.lock`` for a SQLite file; else nothing."""
    path = engine.url.database if engine.dialect.name == "sqlite" else None
    if not path or path == ":memory:":
        yield
        return
    fd = os.open(f"{path}.migrate.lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
