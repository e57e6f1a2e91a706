"""The dispatcher lock: exactly one dispatcher acts on a database (SPEC §5), however many
service processes share it.

A dispatcher calls `hold()` at the start of every cycle and acts only if it returns True.
The lock is held for the process's lifetime (leader election, not per cycle): the leader
keeps it, the other processes stand by and take over within one cycle of its death,
because the lock lives in something the operating system or the database server releases
when the holder dies:

- PostgreSQL: a session-level `pg_try_advisory_lock` on a dedicated AUTOCOMMIT connection
  (no transaction left open), keyed by `hashtextextended('jpushare.dispatcher:' ||
  current_schema(), 0)`, so two installations in different schemas of one database (the
  tests) do not exclude each other. The server drops it when the connection closes: a
  killed process loses it at once. Each `hold()` pings the connection; a broken one means
  the lock may be gone, so that cycle is skipped and the lock retaken next time.
- SQLite (one machine by nature): `flock(LOCK_EX | LOCK_NB)` on `<database file>.dispatcher.lock`,
  released by the kernel when the process dies. An in-memory database needs no lock.

Why this is enough even at the edges (a connection that breaks in the middle of a cycle, so
a standby may take over while the old leader finishes it): every store transition is
guarded by the state it expects under row locks, so a decision cannot be recorded twice,
and `Executor.submit` is idempotent by (job id, attempt), so a run cannot start twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from pathlib import Path
from typing import IO, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.pool import NullPool

log = logging.getLogger(__name__)

LOCK_NAME = "jpushare.dispatcher"


class DispatcherLock(Protocol):
    """Held by at most one process at a time."""

    description: str

    def hold(self) -> bool:
        """True if this process holds the lock now (taking it if it is free)."""
        ...

    def release(self) -> None:
        """Let another process take it (idempotent)."""
        ...


class NoLock:
    """For an in-memory database (a single process by construction)."""

    description = "no lock (in-memory database)"

    def hold(self) -> bool:
        return True

    def release(self) -> None:
        return None


class FileLock:
    """`flock` on a file next to the SQLite database, kept open while held."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.description = f"flock {self.path}"
        self._file: IO[bytes] | None = None

    def hold(self) -> bool:
        if self._file is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = self.path.open("ab")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            return False
        except BaseException:
            f.close()
            raise
        self._file = f
        f.truncate(0)
        f.write(f"{os.getpid()}\n".encode())
        f.flush()
        log.info("dispatcher lock acquired (%s) by process %d", self.description, os.getpid())
        return True

    def release(self) -> None:
        if self._file is None:
            return
        with contextlib.suppress(OSError):
            fcntl.flock(self._file, fcntl.LOCK_UN)
        self._file.close()
        self._file = None


class PostgresAdvisoryLock:
    """A session advisory lock on a connection of its own (see the module docstring)."""

    _TRY = sa.text("SELECT pg_try_advisory_lock(hashtextextended(:name || current_schema(), 0))")
    _UNLOCK = sa.text("SELECT pg_advisory_unlock(hashtextextended(:name || current_schema(), 0))")

    def __init__(self, url: str, name: str = LOCK_NAME) -> None:
        # NullPool: the connection is ours alone and really closes on release.
        self._engine = sa.create_engine(url, poolclass=NullPool)
        self._name = name + ":"
        self._conn: Connection | None = None
        self.description = f"pg_try_advisory_lock({name}:<schema>)"

    def hold(self) -> bool:
        if self._conn is not None:
            try:
                self._conn.execute(sa.text("SELECT 1"))
                return True
            except sa.exc.SQLAlchemyError as exc:
                log.error("dispatcher lock connection broken, lock may be lost: %s", exc)
                self._drop()
                return False
        try:
            conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        except sa.exc.SQLAlchemyError as exc:
            log.error("dispatcher lock: cannot connect: %s", exc)
            return False
        try:
            got = bool(conn.execute(self._TRY, {"name": self._name}).scalar())
        except BaseException:
            conn.close()
            raise
        if not got:
            conn.close()
            return False
        self._conn = conn
        log.info("dispatcher lock acquired (%s) by process %d", self.description, os.getpid())
        return True

    def release(self) -> None:
        if self._conn is None:
            return
        with contextlib.suppress(sa.exc.SQLAlchemyError):
            self._conn.execute(self._UNLOCK, {"name": self._name})
        self._drop()

    def close(self) -> None:
        self.release()
        self._engine.dispose()

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                self._conn.close()
        self._conn = None


def lock_for(database_url: str) -> DispatcherLock:
    """The dispatcher lock that fits the database."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        database = url.database
        if not database or database == ":memory:" or database.startswith("file:"):
            return NoLock()
        return FileLock(Path(database + ".dispatcher.lock"))
    if url.get_backend_name() == "postgresql":
        return PostgresAdvisoryLock(database_url)
    raise ValueError(f"no dispatcher lock for {url.get_backend_name()} databases")
