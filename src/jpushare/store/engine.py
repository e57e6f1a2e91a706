"""Where the database is and how to connect: the URL, the engine and the session factory.

Nothing is built at import time: `database_url()` reads the environment when called, and
`make_engine()` / `make_sessionmaker()` build what the caller asks for.

SQLite (the default, one workstation) gets foreign keys, WAL, a busy timeout and
`BEGIN IMMEDIATE` transactions. The last one matters: with deferred transactions two
writers that both read first deadlock on the upgrade to a write lock and one fails at once
with "database is locked", busy timeout or not. Taking the write lock at BEGIN makes every
transaction wait its turn instead, which is what the guarded state transitions rely on.

Work that only reads does not need that lock, and holding it costs: a `GET /v1/queue`
decides over the whole queue, and with the lock taken at BEGIN every reader waited for
every other reader and for the dispatcher. `read_only_sessions(sessions)` gives sessions
on the same engine (same pool) whose connections carry the `READ_ONLY` execution option;
on SQLite their transactions start with a plain deferred `BEGIN` (in WAL mode readers run
alongside the one writer, each on its snapshot) under `PRAGMA query_only`, so a write that
slips into one fails at once with "attempt to write a readonly database" instead of racing
for the lock (and deadlocking) only under load. Other databases ignore the option: their
transactions are what they were.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker

DATABASE_URL_ENV = "JPUSHARE_DATABASE_URL"
SQLITE_PATH_ENV = "JPUSHARE_SQLITE_PATH"
DEFAULT_SQLITE_PATH = Path("var") / "jpushare.sqlite"
SQLITE_BUSY_TIMEOUT_MS = 30_000
# A database server's connections kept open per engine. Connections above `pool_size` are
# closed when given back, so a pool smaller than the API's concurrent sessions (10, see
# `jpushare.api.deps`) plus the dispatcher's would open and close a server connection
# (a new PostgreSQL backend, milliseconds) for many requests under load.
# Seconds to wait for a database server's connection: a server that is down or cut off
# makes a request fail (the API: 503) and a cycle pause after this long, never hang. A
# `connect_timeout` in the URL wins.
CONNECT_TIMEOUT_S = 5
SERVER_POOL_SIZE = 15
SERVER_POOL_OVERFLOW = 10
# The execution option that marks a connection's transactions read-only (see the module
# docstring); set by `read_only_sessions`, read by SQLite's "begin" hook.
READ_ONLY = "jpushare_read_only"
_QUERY_ONLY_STATE = "jpushare_query_only"  # key in a pooled connection's `info`


def sqlite_url(path: str | os.PathLike[str]) -> str:
    """The SQLAlchemy URL of a SQLite file."""
    return f"sqlite:///{Path(path)}"


def database_url(
    env: Mapping[str, str] | None = None,
    default_sqlite_path: str | os.PathLike[str] | None = None,
) -> str:
    """The database to use: `JPUSHARE_DATABASE_URL`, else a SQLite file.

    The SQLite file is `JPUSHARE_SQLITE_PATH`, else `default_sqlite_path`, else
    `./var/jpushare.sqlite` (relative to the working directory).
    """
    env = os.environ if env is None else env
    url = env.get(DATABASE_URL_ENV, "").strip()
    if url:
        return url
    path = env.get(SQLITE_PATH_ENV, "").strip() or default_sqlite_path or DEFAULT_SQLITE_PATH
    return sqlite_url(path)


def is_sqlite(url: str | URL) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def make_engine(url: str | URL | None = None, *, echo: bool = False) -> Engine:
    """An engine for `url` (default: `database_url()`), set up for its backend.

    A SQLite file's parent directory is created if missing (0700), and the file is the
    service account's alone (0600; SQLite gives its -wal and -shm files the same mode):
    jobs must not read or write the database.
    """
    parsed = make_url(url if url is not None else database_url())
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:" and not database.startswith("file:"):
            _private_sqlite_file(Path(database))
        engine = create_engine(parsed, echo=echo, connect_args={"timeout": 30.0})
        _configure_sqlite(engine)
        return engine
    connect_args: dict[str, Any] = {}
    if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
        connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
    return create_engine(
        parsed,
        echo=echo,
        connect_args=connect_args,
        pool_pre_ping=True,
        pool_size=SERVER_POOL_SIZE,
        max_overflow=SERVER_POOL_OVERFLOW,
    )


def _private_sqlite_file(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(OSError):
            st = p.stat()
            if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & 0o077:
                p.chmod(0o600)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Sessions whose objects stay readable after commit (the repository returns records)."""
    return sessionmaker(engine, expire_on_commit=False)


def read_only_sessions(sessions: sessionmaker[Session]) -> sessionmaker[Session]:
    """Sessions like `sessions` for work that only reads (see the module docstring).

    Same engine, pool and settings; only the `READ_ONLY` option differs. If `sessions` is
    not bound to an engine (a connection, nothing), it is returned as it is: its reads are
    then ordinary transactions, correct but, on SQLite, serialised with the writers.
    """
    bind = sessions.kw.get("bind")
    if not isinstance(bind, Engine):
        return sessions
    return sessionmaker(
        class_=sessions.class_,
        **{**sessions.kw, "bind": bind.execution_options(**{READ_ONLY: True})},
    )


def ping(session: Session) -> None:
    """Raise if the database does not answer."""
    session.execute(text("SELECT 1"))


def is_read_only(bind: Engine | Connection) -> bool:
    """Whether transactions on `bind` are marked read-only (`read_only_sessions`)."""
    return bool(bind.get_execution_options().get(READ_ONLY, False))


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event below emit BEGIN instead of pysqlite.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        read_only = is_read_only(connection)
        # query_only is the connection's, not the transaction's: set it only when it
        # changes (`info` lives as long as the DBAPI connection, cleared if replaced).
        info = connection.connection.info
        if info.get(_QUERY_ONLY_STATE, False) != read_only:
            connection.exec_driver_sql(f"PRAGMA query_only = {int(read_only)}")
            info[_QUERY_ONLY_STATE] = read_only
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")
