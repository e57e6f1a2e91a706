"""Start estimates (like `squeue --start`): how long runs last, and when queued jobs start.

A run's remaining time conditions on what has run (`RunHistory.remaining`): its time
limit's remainder or, without one, for a job that has run t, the median of d - t over its
user's (then its lab's) completed runs of its GPU count that lasted d > t, and "unknown"
(assumed to run as long again as it has) when none lasted that long; a queued job is the
case t = 0 (without history: a stated default). Each estimate says which
(`EstimateBasis`). `estimate_starts` then runs the policy forward from a live snapshot
with the simulator's engine (`engine.forecast`); no running job ends before the next
cycle, so a job the next cycle cannot start is never estimated at the snapshot's instant.

No I/O and no clock: history comes in as plain `PastRun` records (the service's from
`store.completed_runs`, the accuracy bench's from the replay so far).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from jpushare.policy.decide import sort_queue
from jpushare.policy.model import Snapshot
from jpushare.policy.order import PlacementOrder
from jpushare.policy.peers import NamedPolicy
from jpushare.sim.engine import Forecast, forecast

DEFAULT_RUN_S = 3600.0  # a job without a limit or any history is assumed to run an hour


class EstimateBasis(StrEnum):
    """Where a job's (remaining) run time in the forecast came from."""

    TIME_LIMIT = "time_limit"  # the job's own limit (its remainder when running)
    USER_HISTORY = "user_history"  # its user's runs of its GPU count that lasted longer
    LAB_HISTORY = "lab_history"  # the same over its lab
    DEFAULT = "default"  # a queued job without limit or history: DEFAULT_RUN_S
    UNKNOWN = "unknown"  # running, no limit, past every run seen: as long again as so far


@dataclass(frozen=True, slots=True)
class PastRun:
    """One completed job: who ran it, on how many GPUs, for how long."""

    user: str
    lab: str
    num_gpus: int
    run_s: float


@dataclass(frozen=True, slots=True)
class JobOwner:
    """A queued or running job's user and lab (what its history estimate looks up)."""

    user: str
    lab: str


@dataclass(frozen=True, slots=True)
class RunEstimate:
    run_s: float  # the remaining run time (the whole run for a queued job)
    basis: EstimateBasis


def _median_beyond(runs: list[float], elapsed: float) -> float | None:
    """The median of d - elapsed over the sorted `runs` with d > elapsed (None: none)."""
    cut = bisect_right(runs, elapsed)
    n = len(runs) - cut
    if n == 0:
        return None
    mid = cut + n // 2
    d = runs[mid] if n % 2 else (runs[mid - 1] + runs[mid]) / 2
    return d - elapsed


class RunHistory:
    """Completed run times, sorted, per (user, GPU count) and (lab, GPU count)."""

    def __init__(self, runs: Iterable[PastRun]) -> None:
        by_user: dict[tuple[str, int], list[float]] = defaultdict(list)
        by_lab: dict[tuple[str, int], list[float]] = defaultdict(list)
        for r in runs:
            if r.run_s >= 0:
                by_user[(r.user, r.num_gpus)].append(r.run_s)
                by_lab[(r.lab, r.num_gpus)].append(r.run_s)
        self.user = {k: sorted(v) for k, v in by_user.items()}
        self.lab = {k: sorted(v) for k, v in by_lab.items()}

    def remaining(
        self,
        num_gpus: int,
        owner: JobOwner | None,
        time_limit_s: float | None,
        elapsed_s: float = 0.0,
        default_s: float = DEFAULT_RUN_S,
    ) -> RunEstimate:
        """How much longer a job that has run `elapsed_s` (0: queued) runs, and the basis:
        its limit's remainder; without a limit the median of d - t over its user's (then
        its lab's) runs of its GPU count that lasted d > t; else unknown (as long again as
        it has run), or for a queued job the default."""
        elapsed = max(0.0, elapsed_s)
        if time_limit_s is not None and time_limit_s > 0:
            return RunEstimate(max(0.0, time_limit_s - elapsed), EstimateBasis.TIME_LIMIT)
        if owner is not None:
            for table, name, basis in (
                (self.user, owner.user, EstimateBasis.USER_HISTORY),
                (self.lab, owner.lab, EstimateBasis.LAB_HISTORY),
            ):
                left = _median_beyond(table.get((name, num_gpus), []), elapsed)
                if left is not None:
                    return RunEstimate(left, basis)
        if elapsed > 0:
            return RunEstimate(elapsed, EstimateBasis.UNKNOWN)
        return RunEstimate(default_s, EstimateBasis.DEFAULT)

    def estimate(
        self,
        num_gpus: int,
        owner: JobOwner | None,
        time_limit_s: float | None,
        default_s: float = DEFAULT_RUN_S,
    ) -> RunEstimate:
        """The whole run a queued job is assumed to last, and its basis."""
        return self.remaining(num_gpus, owner, time_limit_s, 0.0, default_s)


@dataclass(frozen=True, slots=True)
class StartEstimates:
    """Each queued job's estimated start (None: beyond the forecast) and run-time basis."""

    starts: Mapping[str, float | None]
    basis: Mapping[str, EstimateBasis]  # queued and running jobs alike
    forecast: Forecast


def estimate_starts(
    snapshot: Snapshot,
    owners: Mapping[str, JobOwner],
    history: RunHistory,
    *,
    policy: str | NamedPolicy = "reservation",
    placement: PlacementOrder | str = PlacementOrder.PACK,
    cycle_s: float = 5.0,
    max_cycles: int | None = None,
    max_jobs: int | None = None,
    default_run_s: float = DEFAULT_RUN_S,
    follow: Iterable[str] | None = None,
) -> StartEstimates:
    """Every queued job's estimated start from `snapshot`, by `policy` (a name of
    `POLICIES`, or one of them; default SPEC §3's reservation policy).

    `owners`: job id -> user and lab, for queued and running jobs (a job missing here gets
    the default run time). An estimate never precedes `snapshot.now`, and only a job the
    next cycle starts gets `snapshot.now`: a running job's remaining time (see
    `RunHistory.remaining`) is at least one cycle, so none "ends at once".

    Bounded cost: each forecast cycle walks the queue, so `max_jobs` keeps only that many
    jobs from the top of the fair-share order (the rest get None: beyond the forecast; the
    kept ones' estimates ignore the later jobs, which at the next cycle rank below them
    but could take GPUs they would have used later), and `max_cycles` stops the forecast
    (jobs not started by then get None). `follow`: stop once these queued jobs started
    (default: all; the others' estimates are then None where they had not started yet).
    """
    everyone = snapshot.queue
    run_s: dict[str, float] = {}
    basis: dict[str, EstimateBasis] = {}
    for q in snapshot.queue:
        e = history.estimate(q.num_gpus, owners.get(q.job_id), q.time_limit_s, default_run_s)
        run_s[q.job_id] = e.run_s
        basis[q.job_id] = e.basis
    for r in snapshot.running:
        elapsed = max(0.0, snapshot.now - r.started_at)
        e = history.remaining(r.num_gpus, owners.get(r.job_id), r.time_limit_s, elapsed)
        # Ends no sooner than the next cycle: the cycle that loaded this state saw it running.
        run_s[r.job_id] = elapsed + max(e.run_s, cycle_s)
        basis[r.job_id] = e.basis
    if max_jobs is not None and len(snapshot.queue) > max_jobs:
        kept = tuple(sort_queue(snapshot.queue, snapshot.lab_usage)[:max_jobs])
        snapshot = replace(snapshot, queue=kept)
    labs = {r.job_id: owners[r.job_id].lab for r in snapshot.running if r.job_id in owners}
    fc = forecast(
        snapshot,
        run_s,
        policy=policy,
        placement=placement,
        cycle_s=cycle_s,
        max_cycles=max_cycles,
        running_labs=labs,
        follow=follow,
    )
    starts: dict[str, float | None] = {
        q.job_id: (max(snapshot.now, fc.starts[q.job_id]) if q.job_id in fc.starts else None)
        for q in everyone
    }
    return StartEstimates(starts, basis, fc)
