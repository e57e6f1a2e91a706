"""The dispatcher's loop: a cycle every `cycle_s` seconds while this process holds the lease.

`Dispatcher.run_forever(stop)` is what `jpushare serve` runs on a thread; `run_once()` is
one lease renewal plus one cycle (tests drive it directly). A cycle that raises is logged
and the loop goes on: every cycle's effects are transactions and idempotent calls, so the
next cycle starts from whatever the last one committed. A cycle that finds the lease taken
by another process (`LeaseLost`, see `dispatcher.lock`) has recorded nothing; this process
stands by from then on. While the database cannot be reached the loop logs it once, one
line, and says when it is back: dispatching pauses and resumes, nothing is decided blind.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import sqlalchemy as sa

from jpushare.dispatcher.cycle import CycleDeps, CycleReport, run_cycle
from jpushare.dispatcher.lock import DispatcherLock, LeaseLost

log = logging.getLogger(__name__)

CycleHook = Callable[[CycleReport], None]
# Called with the kind of a cycle that failed by raising: database | lease_lost | error.
FailureHook = Callable[[str], None]


class Dispatcher:
    """Runs `run_cycle` every `cycle_s` seconds, only while holding `lock`.

    `on_cycle` is called with each report (the metrics' cycle-duration hook), `on_failure`
    with the kind of each cycle that raised (the health counters); an exception in either
    is logged, never fatal.
    """

    def __init__(
        self,
        deps: CycleDeps,
        lock: DispatcherLock,
        *,
        cycle_s: float = 5.0,
        on_cycle: CycleHook | None = None,
        on_failure: FailureHook | None = None,
    ) -> None:
        if cycle_s <= 0:
            raise ValueError("cycle_s must be positive")
        self.deps = replace(deps, fence=lock)  # the cycle's transactions are fenced by it
        self.lock = lock
        self.cycle_s = cycle_s
        self.on_cycle = on_cycle
        self.on_failure = on_failure
        self._leading = False
        self._database_down = False

    def run_once(self) -> CycleReport | None:
        """One cycle if this process holds the lock (None if another one does)."""
        held = self.lock.hold()
        if held != self._leading:
            if held:
                log.info("this process is now the dispatcher (%s)", self.lock.description)
            else:
                log.warning("another process holds the dispatcher lease: standing by")
        self._leading = held
        if not held:
            return None
        try:
            report = run_cycle(self.deps)
        except LeaseLost as exc:
            log.warning("cycle abandoned, nothing recorded: %s", exc)
            self.lock.lost()
            self._leading = False
            self._failed("lease_lost")
            return None
        if report.observed is None:
            log.warning(report.summary())
        elif report.dispatched.started or report.dispatched.refused or report.resubmitted.started:
            log.info(report.summary())
        else:
            log.debug(report.summary())
        if self.on_cycle is not None:
            try:
                self.on_cycle(report)
            except Exception:
                log.exception("the cycle hook failed")
        return report

    def run_forever(self, stop: threading.Event) -> None:
        """Cycle every `cycle_s` until `stop` is set; then let go of the lock."""
        log.info("dispatcher loop: a cycle every %g s (%s)", self.cycle_s, self.lock.description)
        try:
            while not stop.is_set():
                began = time.monotonic()
                try:
                    self.run_once()
                    self._database_back()
                except Exception as exc:
                    if isinstance(exc, sa.exc.SQLAlchemyError) and database_down(exc):
                        self._database_lost(exc)
                        self._failed("database")
                    else:
                        log.exception("dispatcher cycle failed; trying again next cycle")
                        self._failed("error")
                stop.wait(max(0.0, self.cycle_s - (time.monotonic() - began)))
        finally:
            self.lock.release()
            self._leading = False
            log.info("dispatcher loop stopped")

    def _failed(self, kind: str) -> None:
        if self.on_failure is not None:
            try:
                self.on_failure(kind)
            except Exception:
                log.exception("the failure hook failed")

    def _database_lost(self, exc: sa.exc.SQLAlchemyError) -> None:
        if not self._database_down:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            log.error("database unavailable, dispatching paused: %s", first_line)
        self._database_down = True

    def _database_back(self) -> None:
        if self._database_down:
            log.warning("database available again")
        self._database_down = False


# What a database that is down, restarting or out of connections raises (a lost
# connection, a refused one, a pool that waited too long): not a bug, one log line.
DATABASE_DOWN = (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.TimeoutError)


def database_down(exc: sa.exc.SQLAlchemyError) -> bool:
    """Whether `exc` says the database or our connection to it is gone (a server that
    ended the session, e.g. PostgreSQL's idle-in-transaction timeout, included)."""
    if isinstance(exc, DATABASE_DOWN):
        return True
    return isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated
