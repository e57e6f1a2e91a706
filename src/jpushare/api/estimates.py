"""Start estimates for the API (`squeue --start`): one forecast per cycle, shared by requests.

A forecast runs the policy forward from the snapshot a request loaded (`sim.estimate`), so
it costs far more than an answer (bench/bench_estimate.py: ~0.3 s at 1,000 queued jobs,
~1 s at 10,000 with the budget below). `StartEstimateCache` therefore computes it at most
once per dispatch cycle: a request whose snapshot equals the last forecast's (same queue,
reservations, running jobs, busy GPUs and usage) reuses it for up to `REFRESH_S`; a
changed state is forecast again once a cycle has passed since the last forecast, and until
then the last one answers (estimates are absolute times, so they stay meaningful; a job
newer than the forecast has none yet). One forecast at a time per process: a request that
finds one under way uses the previous result instead of waiting.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session

from jpushare.policy import PlacementOrder, Snapshot, decide
from jpushare.policy.peers import NamedPolicy
from jpushare.sim.estimate import (
    EstimateBasis,
    JobOwner,
    PastRun,
    RunHistory,
    StartEstimates,
    estimate_starts,
)
from jpushare.store.run_history import completed_runs, waiting_and_running_owners
from jpushare.vocabulary import JobId, job_id

log = logging.getLogger(__name__)

MAX_FORECAST_JOBS = 2000  # the top of the queue the forecast follows (the rest: no estimate)
MAX_FORECAST_CYCLES = 5000  # cycles simulated at most per forecast
REFRESH_S = 60.0  # an unchanged state is forecast again after this (overdue runs move)

Inputs = tuple[dict[str, JobOwner], list[PastRun]]


@dataclass(frozen=True, slots=True)
class JobEstimate:
    """One queued job's estimated start (None: beyond the forecast) and its run's basis."""

    start: float | None
    basis: EstimateBasis | None


def _fingerprint(snapshot: Snapshot) -> int:
    return hash(
        (
            tuple(snapshot.queue),
            tuple(snapshot.running),
            tuple(snapshot.placements),
            tuple(sorted(snapshot.lab_usage.items())),
        )
    )


class StartEstimateCache:
    """The latest forecast of this process (see the module docstring). Thread-safe."""

    def __init__(
        self,
        cycle_s: float = 5.0,
        placement_order: PlacementOrder = PlacementOrder.PACK,
        *,
        policy: NamedPolicy = decide,
        max_jobs: int = MAX_FORECAST_JOBS,
        max_cycles: int = MAX_FORECAST_CYCLES,
    ) -> None:
        self.cycle_s = cycle_s
        self.placement_order = placement_order
        self.policy = policy
        self.max_jobs = max_jobs
        self.max_cycles = max_cycles
        self.forecasts = 0  # how many were computed (tests, metrics)
        self._lock = threading.Lock()
        self._key: int | None = None
        self._at = float("-inf")
        self._result: StartEstimates | None = None

    def get(self, snapshot: Snapshot, inputs: Callable[[], Inputs]) -> StartEstimates | None:
        """The estimates for `snapshot`'s state, forecast now or reused (module docstring).

        `inputs` reads the owners and past runs; it is called only when a forecast runs.
        None when no forecast could be made (logged).
        """
        key = _fingerprint(snapshot)
        now = snapshot.now
        if not self._stale(key, now):
            return self._result
        if not self._lock.acquire(blocking=self._result is None):
            return self._result  # another request is forecasting: use the previous one
        try:
            if not self._stale(key, now):
                return self._result
            owners, runs = inputs()
            try:
                result = estimate_starts(
                    snapshot,
                    owners,
                    RunHistory(runs),
                    policy=self.policy,
                    placement=self.placement_order,
                    cycle_s=self.cycle_s,
                    max_cycles=self.max_cycles,
                    max_jobs=self.max_jobs,
                )
            except Exception:  # a forecast must never break the queue or why
                log.exception("start estimates: the forecast failed")
                result = None
            self._key, self._at, self._result = key, now, result
            self.forecasts += 1
            return result
        finally:
            self._lock.release()

    def _stale(self, key: int, now: float) -> bool:
        age = now - self._at
        if key == self._key:
            return age >= REFRESH_S or age < 0
        return age >= self.cycle_s or age < 0


def job_estimate(
    estimates: StartEstimates | None, job_id: JobId, now: float | None = None
) -> JobEstimate:
    """One job's figures from a forecast (both None when there is none).

    `now`: the request's instant. A reused forecast is older than the request, so a start
    it put before `now` (the job has not started yet) is raised to `now`: never "ago"."""
    if estimates is None:
        return JobEstimate(None, None)
    start = estimates.starts.get(job_id)
    if start is not None and now is not None:
        start = max(start, now)
    return JobEstimate(start, estimates.basis.get(job_id))


def load_inputs(session: Session) -> Inputs:
    """The owners of the queued and running jobs and the recent completed runs."""
    owners = {
        job_id(jid): JobOwner(user, lab)
        for jid, (user, lab) in waiting_and_running_owners(session).items()
    }
    runs = [PastRun(r.user, r.lab, r.num_gpus, r.run_s) for r in completed_runs(session)]
    return owners, runs
