"""Start estimates (like `squeue --start`): how long runs last, and when queued jobs start.

A job's run lasts its time limit when it has one; lacking one, the median run time of its
user's completed jobs of the same GPU count, else of its lab's, else a stated default.
Each estimate says which (`EstimateBasis`). `estimate_starts` then runs the policy forward
from a live snapshot with the simulator's engine (`engine.forecast`).

No I/O and no clock: history comes in as plain `PastRun` records (the service's from
`store.completed_runs`, the accuracy bench's from the replay so far).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from statistics import median

from jpushare.policy.decide import sort_queue
from jpushare.policy.model import QueuedJob, RunningJob, Snapshot
from jpushare.policy.order import PlacementOrder
from jpushare.policy.peers import NamedPolicy
from jpushare.sim.engine import Forecast, forecast

DEFAULT_RUN_S = 3600.0  # a job without a limit or any history is assumed to run an hour


class EstimateBasis(StrEnum):
    """Where a job's run time in the forecast came from."""

    TIME_LIMIT = "time_limit"  # the job's own limit
    USER_HISTORY = "user_history"  # median of its user's completed runs of its GPU count
    LAB_HISTORY = "lab_history"  # the same over its lab
    DEFAULT = "default"  # DEFAULT_RUN_S (or the caller's default)


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
    run_s: float
    basis: EstimateBasis


class RunHistory:
    """Median run times per (user, GPU count) and (lab, GPU count), from past runs."""

    def __init__(self, runs: Iterable[PastRun]) -> None:
        by_user: dict[tuple[str, int], list[float]] = defaultdict(list)
        by_lab: dict[tuple[str, int], list[float]] = defaultdict(list)
        for r in runs:
            if r.run_s >= 0:
                by_user[(r.user, r.num_gpus)].append(r.run_s)
                by_lab[(r.lab, r.num_gpus)].append(r.run_s)
        self.user = {k: float(median(v)) for k, v in by_user.items()}
        self.lab = {k: float(median(v)) for k, v in by_lab.items()}

    def estimate(
        self,
        num_gpus: int,
        owner: JobOwner | None,
        time_limit_s: float | None,
        default_s: float = DEFAULT_RUN_S,
    ) -> RunEstimate:
        """The run time the forecast assumes for one job, and its basis."""
        if time_limit_s is not None and time_limit_s > 0:
            return RunEstimate(time_limit_s, EstimateBasis.TIME_LIMIT)
        if owner is not None:
            user = self.user.get((owner.user, num_gpus))
            if user is not None:
                return RunEstimate(user, EstimateBasis.USER_HISTORY)
            lab = self.lab.get((owner.lab, num_gpus))
            if lab is not None:
                return RunEstimate(lab, EstimateBasis.LAB_HISTORY)
        return RunEstimate(default_s, EstimateBasis.DEFAULT)


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
    the default run time). An estimate never precedes `snapshot.now`.

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
    jobs: list[QueuedJob | RunningJob] = [*snapshot.queue, *snapshot.running]
    for job in jobs:
        e = history.estimate(job.num_gpus, owners.get(job.job_id), job.time_limit_s, default_run_s)
        run_s[job.job_id] = e.run_s
        basis[job.job_id] = e.basis
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
