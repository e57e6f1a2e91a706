"""The dispatching process's side of the health counters: what it counts, and its writes.

`CountingExecutor` wraps the dispatcher's executor and counts the calls that raise, by
call (a refused submission is an answer, not a failure). `HealthRecorder` gathers those
counts, each cycle's duration and its outcome (succeeded; failed because the executor could not be
observed; failed by raising: database, lease_lost, error) and adds them to the database
after every cycle (`store.health`), where every API process reads them. Counts a write
could not store (the database is down) are kept and added by the next write that works.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import ParamSpec, TypeVar

from sqlalchemy.orm import Session, sessionmaker

from jpushare.dispatcher.cycle import CycleReport
from jpushare.executors.base import (
    Executor,
    GpuGroup,
    LaunchSpec,
    PlansGpus,
    ResolvesLostRuns,
    RunInfo,
    SubmitRefused,
)
from jpushare.store.health import (
    CYCLE_FAILED,
    CYCLE_MS,
    CYCLE_OK,
    CYCLES_TIMED,
    EXECUTOR_FAILED,
    HealthCount,
    add_health_counts,
)
from jpushare.store.times import utc_now

P = ParamSpec("P")
T = TypeVar("T")

log = logging.getLogger(__name__)


class HealthRecorder:
    """Counts of one dispatching process, written after each cycle (thread-safe)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        holder: str,
        cycle_s: float,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.sessions = sessions
        self.holder = holder
        self.cycle_s = cycle_s
        self.clock = clock
        self._pending: dict[str, HealthCount] = {}
        self._last_cycle_s: float | None = None
        self._lock = threading.Lock()

    def count(self, name: str, n: int = 1) -> None:
        """`n` more of counter `name` (a `store.health` name), now."""
        at = self.clock()
        with self._lock:
            was = self._pending.get(name)
            self._pending[name] = HealthCount((was.count if was else 0) + n, at)

    def executor_failed(self, call: str) -> None:
        self.count(EXECUTOR_FAILED + call)

    def cycle_done(self, report: CycleReport) -> None:
        """A cycle that returned: failed if it could not observe the executor."""
        self.count(CYCLE_OK if report.observed is not None else CYCLE_FAILED + "executor")
        self.count(CYCLE_MS, round(max(0.0, report.duration_s) * 1000))
        self.count(CYCLES_TIMED)
        with self._lock:
            self._last_cycle_s = max(0.0, report.duration_s)
        self.flush()

    def cycle_failed(self, kind: str) -> None:
        """A cycle that raised (kind: database, lease_lost, error)."""
        self.count(CYCLE_FAILED + kind)
        self.flush()

    def flush(self) -> bool:
        """Add the pending counts to the database; False (kept for later) if it failed."""
        with self._lock:
            pending, self._pending = self._pending, {}
            last_cycle_s = self._last_cycle_s
        if not pending:
            return True
        try:
            with self.sessions.begin() as session:
                add_health_counts(
                    session,
                    pending,
                    holder=self.holder,
                    cycle_s=self.cycle_s,
                    last_cycle_s=last_cycle_s,
                )
        except Exception as exc:
            log.debug("health counts not stored yet: %s", exc)
            with self._lock:
                for name, c in pending.items():
                    now = self._pending.get(name)
                    self._pending[name] = (
                        HealthCount(c.count + now.count, max(c.last_at, now.last_at))
                        if now is not None
                        else c
                    )
            return False
        return True


class CountingExecutor:
    """`inner` with every call that raises counted by `on_failure(call)` (then re-raised)."""

    def __init__(self, inner: Executor, on_failure: Callable[[str], None]) -> None:
        self.inner = inner
        self.on_failure = on_failure

    def _failed(self, call: str) -> None:
        try:
            self.on_failure(call)
        except Exception:
            log.exception("counting a failed executor call failed")

    def _counted(self, call: str, run: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`run(*args, **kwargs)`, a failure of it counted as `call` (then re-raised)."""
        try:
            return run(*args, **kwargs)
        except Exception:
            self._failed(call)
            raise

    def inventory(self) -> list[GpuGroup]:
        return self._counted("inventory", self.inner.inventory)

    def submit(self, spec: LaunchSpec) -> str:
        try:
            return self.inner.submit(spec)
        except SubmitRefused:
            raise
        except Exception:
            self._failed("submit")
            raise

    def runs(self) -> list[RunInfo]:
        return self._counted("runs", self.inner.runs)

    def find(self, job_id: str, attempt: int) -> RunInfo | None:
        return self._counted("find", self.inner.find, job_id, attempt)

    def cancel(self, executor_id: str) -> None:
        self._counted("cancel", self.inner.cancel, executor_id)

    def log(self, job_id: str, attempt: int) -> str:
        return self.inner.log(job_id, attempt)

    def planned_gpus(self, spec: LaunchSpec) -> list[int] | None:
        """The inner executor's GPU indices for `spec`, where it picks them (`PlansGpus`)."""
        return self.inner.planned_gpus(spec) if isinstance(self.inner, PlansGpus) else None


class CountingLostRunsExecutor(CountingExecutor):
    """A `CountingExecutor` for an executor that resolves lost runs (Slurm: sacct)."""

    def __init__(self, inner: ResolvesLostRuns, on_failure: Callable[[str], None]) -> None:
        assert isinstance(inner, ResolvesLostRuns)
        super().__init__(inner, on_failure)  # type: ignore[arg-type]
        self._resolver = inner

    def lost_run(self, job_id: str, attempt: int, executor_id: str) -> RunInfo:
        return self._counted("lost_run", self._resolver.lost_run, job_id, attempt, executor_id)


def counting(executor: Executor, on_failure: Callable[[str], None]) -> CountingExecutor:
    """`executor` with its failed calls counted, keeping its ability to resolve lost runs."""
    if isinstance(executor, ResolvesLostRuns):
        return CountingLostRunsExecutor(executor, on_failure)
    return CountingExecutor(executor, on_failure)
