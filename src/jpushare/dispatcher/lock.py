"""Who dispatches: a lease in the database, renewed each cycle, and the fence that makes a
leader that lost it record and start nothing (SPEC §5: one dispatcher acts at a time).

Leadership used to be a PostgreSQL session advisory lock (a `flock` beside the SQLite file)
held for the process's life. A leader that was frozen (SIGSTOP, a stalled VM, a swap
storm) or cut off from the database while its connection stayed open kept the lock, and
nothing was dispatched for as long as it stayed so. Now:

- The lease: one row of `dispatcher_leases` (`store.leadership`): holder, epoch,
  expires_at, written with the database's clock. The leader renews it at the start of
  every cycle and at the end of every transaction of the cycle, for `lease_s` (default:
  three cycle lengths). Another process takes it only once it has expired, which adds
  one to the epoch. A standby therefore takes over after about `lease_s` without a
  renewal; a leader that stops cleanly releases it, and a standby takes it at its next
  cycle.
- The fence: every writing transaction of a cycle ends by renewing the lease *for its
  epoch* (`transaction()`). If another process took it meanwhile, the renewal matches no
  row, `LeaseLost` is raised, the transaction rolls back (nothing recorded) and the
  dispatcher steps down. The renewal's row lock orders a takeover after a commit under
  the old epoch, never between its statements.
- Before each side effect (submit, cancel, the LLM router's yield) the leader checks its
  own deadline (`may_act()`): the monotonic time before its last successful renewal plus
  0.9 `lease_s`. That time precedes the renewal's database time, so the deadline passes
  before the database lets anyone take the lease. A leader frozen between a commit and its
  `sbatch` therefore wakes past its deadline and starts nothing; its jobs stay DISPATCHED
  and the new leader submits them (idempotent by (job, attempt), which also covers a
  freeze in the microseconds between the check and the call).
- PostgreSQL: the connections of fenced transactions have
  `idle_in_transaction_session_timeout` = `lease_s`, so a leader frozen *inside* a
  transaction (its row locks held by a session that stays open) is cut off by the server,
  and the takeover waits at most that long.

Why a lease row on SQLite too, and not `flock` plus an epoch: a frozen process keeps its
`flock` (the kernel releases it only on death), which is the very failure this fixes, and
one mechanism on both databases is one mechanism to test. What SQLite cannot have: a
leader frozen inside a write transaction holds SQLite's database-wide write lock, and no
server can cut it off; every writer (the API's too) then waits for it. Outside a
transaction, which is where a dispatcher spends nearly all of its time, a frozen leader
on SQLite is replaced like on PostgreSQL.

The price: a standby takes over a *dead* leader after up to `lease_s` (the advisory lock
was released at once by the server) unless the leader stopped cleanly.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from jpushare.store.engine import make_engine, make_sessionmaker
from jpushare.store.leadership import LeaseLost, release_lease, renew_lease, take_lease

log = logging.getLogger(__name__)

# The share of the lease a leader trusts its own clock for (clock rate differences).
LOCAL_SHARE = 0.9

__all__ = ["DispatcherLease", "DispatcherLock", "Fence", "LeaseLost", "NoLock", "lock_for"]


class Fence(Protocol):
    """What a cycle asks before it records or acts (see the module docstring)."""

    def transaction(self, sessions: sessionmaker[Session]) -> AbstractContextManager[Session]:
        """A transaction that commits only if this process still leads (else `LeaseLost`)."""
        ...

    def may_act(self) -> bool:
        """Whether this process may still start or stop runs now."""
        ...


class DispatcherLock(Fence, Protocol):
    """Held by at most one process at a time."""

    description: str

    def hold(self) -> bool:
        """True if this process leads now (renewing or taking the lease)."""
        ...

    def lost(self) -> None:
        """Forget leadership after `LeaseLost` (the next `hold` tries to take it again)."""
        ...

    def release(self) -> None:
        """Let another process take it (idempotent)."""
        ...


class NoLock:
    """One process by construction (an in-memory database, the cycle's unit tests)."""

    description = "no lock (single process)"

    def hold(self) -> bool:
        return True

    def lost(self) -> None:
        return None

    def release(self) -> None:
        return None

    def transaction(self, sessions: sessionmaker[Session]) -> AbstractContextManager[Session]:
        return sessions.begin()

    def may_act(self) -> bool:
        return True


class DispatcherLease:
    """The lease of `store.leadership`, held by this process under `holder`."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        lease_s: float,
        *,
        holder: str | None = None,
        owns_engine: bool = False,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if lease_s <= 0:
            raise ValueError("lease_s must be positive")
        self.sessions = sessions
        self.lease_s = lease_s
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.description = f"lease of {lease_s:g} s as {self.holder}"
        self._owns_engine = owns_engine
        self._monotonic = monotonic  # the holder's own clock, for `may_act`
        self._epoch: int | None = None
        self._valid_until = 0.0  # on `monotonic`'s clock

    @property
    def epoch(self) -> int | None:
        """The epoch this process leads under, or None."""
        return self._epoch

    def hold(self) -> bool:
        if self._epoch is not None:
            try:
                with self.transaction(self.sessions):
                    pass  # the transaction's end renews the lease
                return True
            except LeaseLost:
                self.lost()
        began = self._monotonic()
        with self.sessions.begin() as session:
            self._bound_idle(session)
            epoch = take_lease(session, self.holder, self.lease_s)
        if epoch is None:
            return False
        self._epoch, self._valid_until = epoch, began + LOCAL_SHARE * self.lease_s
        log.info("dispatcher lease taken: epoch %d, %s", epoch, self.description)
        return True

    @contextlib.contextmanager
    def transaction(self, sessions: sessionmaker[Session]) -> Iterator[Session]:
        epoch = self._epoch
        if epoch is None:
            raise LeaseLost("this process does not hold the dispatcher lease")
        with sessions.begin() as session:
            self._bound_idle(session)
            yield session
            began = self._monotonic()
            try:
                renew_lease(session, self.holder, epoch, self.lease_s)
            except LeaseLost:
                self.lost()
                raise
        if self._epoch == epoch:
            self._valid_until = max(self._valid_until, began + LOCAL_SHARE * self.lease_s)

    def may_act(self) -> bool:
        return self._epoch is not None and self._monotonic() < self._valid_until

    def lost(self) -> None:
        if self._epoch is not None:
            log.warning(
                "dispatcher lease lost (epoch %d moved on): stepping down, this process "
                "records and starts nothing more",
                self._epoch,
            )
        self._epoch, self._valid_until = None, 0.0

    def release(self) -> None:
        epoch, self._epoch, self._valid_until = self._epoch, None, 0.0
        if epoch is None:
            return
        try:
            with self.sessions.begin() as session:
                release_lease(session, self.holder, epoch)
        except sa.exc.SQLAlchemyError as exc:  # it expires by itself
            log.warning("could not release the dispatcher lease: %s", exc)

    def close(self) -> None:
        self.release()
        bind = self.sessions.kw.get("bind")
        if self._owns_engine and isinstance(bind, sa.Engine):
            bind.dispose()

    def _bound_idle(self, session: Session) -> None:
        """PostgreSQL: the server ends a transaction that idles longer than the lease.

        Set once per pooled connection (session-wide, remembered in the connection's
        `info`): the API's requests may reuse the connection later, and none of their
        transactions idles for that long either.
        """
        connection = session.connection()
        if connection.dialect.name != "postgresql":
            return
        ms = str(max(1, int(self.lease_s * 1000)))
        info = connection.connection.info
        if info.get(_IDLE_TIMEOUT_KEY) != ms:
            connection.execute(
                sa.text("SELECT set_config('idle_in_transaction_session_timeout', :ms, false)"),
                {"ms": ms},
            )
            info[_IDLE_TIMEOUT_KEY] = ms


_IDLE_TIMEOUT_KEY = "jpushare_idle_in_transaction_ms"  # in a pooled connection's `info`


def lock_for(
    database_url: str,
    *,
    sessions: sessionmaker[Session] | None = None,
    lease_s: float = 15.0,
    holder: str | None = None,
) -> DispatcherLock:
    """The dispatcher's leadership on this database: a lease (`sessions`, else an engine of
    its own), or no lock for an in-memory SQLite database, which one process holds."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        database = url.database
        if not database or database == ":memory:" or database.startswith("file:"):
            return NoLock()
    owns = sessions is None
    if sessions is None:
        sessions = make_sessionmaker(make_engine(database_url))
    return DispatcherLease(sessions, lease_s, holder=holder, owns_engine=owns)
