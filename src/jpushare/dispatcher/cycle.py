"""One dispatcher cycle (SPEC §3, §5): six numbered steps, three transactions.

1. Observe (`dispatcher.observe`): read the executor with no transaction open, then record
   what it says in ONE transaction (inventory, run starts and ends with their charges,
   requeues, busy GPUs); then stop the runs no job wants any more, and launch again the
   jobs recorded DISPATCHED that the executor has no run for (steps 5-6 for them).
2. Load the snapshot, 3. decide (the policy, a pure function: `CycleDeps.policy`),
4. record the decisions: ONE transaction. Its commit is the point of no return
   ("assume"): only what it applied is started, never what the policy proposed.
5. Act, 6. confirm or fail (`dispatcher.launch`): submit each recorded dispatch, then
   record the accepted runs' ids in ONE transaction; a refusal fails its job, any other
   error leaves it DISPATCHED for the next cycle's observe.

The cycle never commits anything the executor has not told it, and never tells the executor
anything the database has not committed. Crash points for tests: `crash_points.py`.

Fencing (`dispatcher.lock`): every writing transaction above is opened with `deps.begin()`,
which commits only while this process holds the dispatcher lease, and every executor call
(submit, cancel) and router yield is preceded by `deps.check_may_act()`. A leader that lost
the lease while frozen or cut off gets `LeaseLost` from the first of them: nothing more is
recorded or started, and the loop steps down.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from jpushare import store
from jpushare.dispatcher.crash_points import crash_point
from jpushare.dispatcher.cycle_deps import CycleDeps, InventoryMemo
from jpushare.dispatcher.launch import Outcome, launch
from jpushare.dispatcher.observe import (
    Busy,
    Observed,
    read_executor,
    record_observation,
    stop_stale_runs,
)
from jpushare.policy import AbsorbReservation, Decisions, ReleaseReservation, StartReservation

__all__ = ["CycleDeps", "CycleReport", "InventoryMemo", "Observed", "Outcome", "run_cycle"]

log = logging.getLogger(__name__)


def run_cycle(deps: CycleDeps) -> CycleReport:
    """One whole cycle, steps 1-6 of the module docstring. Raises only on database errors."""
    t0 = time.perf_counter()

    # 1. Observe, then stop stale runs and launch again what a crash left unsubmitted.
    try:
        seen = read_executor(deps)
    except Exception as exc:  # any backend failure: do not decide blind
        log.error("executor unreachable, cycle skipped: %s", exc)
        return CycleReport(deps.clock(), time.perf_counter() - t0, None, error=f"executor: {exc}")
    # The cycle's one reading of the clock, once the executor has answered: observe records,
    # the policy decides and the launches are confirmed at the same instant (steps 1-6).
    at = deps.clock()
    observed = record_observation(deps, seen, at)
    crash_point("after_observe")
    stopped = stop_stale_runs(deps, observed.stale)
    resubmitted = launch(deps, observed.resubmit, at)
    t1 = time.perf_counter()

    # 2-4. Snapshot, decide, record: one transaction.
    decisions, recorded = decide_and_record(deps, observed.busy, at)
    t2 = time.perf_counter()

    # 5-6. Act, then confirm (or fail what the executor refused).
    dispatched = launch(deps, recorded.dispatched, at)
    t3 = time.perf_counter()

    reserved, absorbed, released = _reservations(recorded)
    return CycleReport(
        at=at,
        duration_s=t3 - t0,
        observed=observed,
        queue_length=len(decisions.order) - len(recorded.dispatched),
        dispatched=dispatched,
        resubmitted=resubmitted,
        stopped_runs=stopped,
        reservations_started=reserved,
        reservations_absorbed=absorbed,
        reservations_released=released,
        phases_s={"observe": t1 - t0, "decide": t2 - t1, "act": t3 - t2},
    )


def decide_and_record(
    deps: CycleDeps, busy: Busy, now: datetime
) -> tuple[Decisions, store.Recorded]:
    """Steps 2-4 in one transaction at the cycle's `now`: what the policy decided, and what
    of it was recorded."""
    with deps.begin() as session:
        # Held and waiting jobs whose dependency or array throttle now allows enter the
        # queue first (`store.waiting_jobs`: a few set-based statements).
        waited = store.refresh_waiting(session, now)
        for job_id, why in waited.to_cancel:  # --kill-on-invalid-dep
            store.cancel_job(session, job_id, now, reason=why)
        snapshot = store.load_snapshot(session, now, busy, deps.queue_memo)
        decisions = deps.policy(snapshot, deps.placement_order)
        recorded = store.record_decisions(session, decisions, now)
        if recorded.dispatched:
            crash_point("in_record")
    if recorded.dispatched:
        crash_point("after_record")
    return decisions, recorded


@dataclass(frozen=True, slots=True)
class CycleReport:
    """One cycle, for the log and the metrics."""

    at: datetime
    duration_s: float
    observed: Observed | None  # None: the executor could not be read; nothing decided
    queue_length: int = 0  # jobs still queued after the cycle
    dispatched: Outcome = field(default_factory=Outcome)
    resubmitted: Outcome = field(default_factory=Outcome)
    stopped_runs: tuple[str, ...] = ()  # executor ids of stale runs stopped
    reservations_started: int = 0
    reservations_absorbed: int = 0
    reservations_released: Mapping[str, int] = field(default_factory=dict)  # reason -> count
    error: str | None = None
    # Seconds per step: observe (1, with its stops and resubmits), decide (2-4), act (5-6).
    phases_s: Mapping[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        """One log line."""
        if self.observed is None:
            return f"cycle skipped ({self.error}) in {self.duration_s * 1000:.0f} ms"
        o = self.observed
        released = ", ".join(f"{k} {v}" for k, v in sorted(self.reservations_released.items()))
        parts = [
            f"dispatched {len(self.dispatched.started)}",
            f"refused {len(self.dispatched.refused)}" if self.dispatched.refused else "",
            f"deferred {len(self.dispatched.deferred)}" if self.dispatched.deferred else "",
            f"resubmitted {len(self.resubmitted.started)}" if self.resubmitted.started else "",
            f"reservations +{self.reservations_started} absorbed {self.reservations_absorbed}"
            + (f" released {released}" if released else ""),
            f"started {o.started} ended {o.ended} requeued {o.requeued}",
            f"stopped {len(self.stopped_runs)}" if self.stopped_runs else "",
            f"queue {self.queue_length}",
            f"{self.duration_s * 1000:.0f} ms",
        ]
        return "cycle: " + ", ".join(p for p in parts if p)


def _reservations(recorded: store.Recorded) -> tuple[int, int, dict[str, int]]:
    """Reservations started, absorbed, and released by reason, among the applied actions."""
    released: Counter[str] = Counter()
    started = absorbed = 0
    for action in recorded.applied:
        if isinstance(action, StartReservation):
            started += 1
        elif isinstance(action, AbsorbReservation):
            absorbed += 1
        elif isinstance(action, ReleaseReservation):
            released[action.reason.value] += 1
    return started, absorbed, dict(released)
