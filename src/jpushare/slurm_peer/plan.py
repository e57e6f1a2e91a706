"""From trace jobs to sbatch requests, and from Slurm's records back to the simulator's result.

Pure: no command, no clock. The scale: at `speed` S, trace second t happens at wall second
`t0 + t / S`, and a wall time w reads back as trace time `(w - t0) * S`. Slurm keeps whole
seconds and whole-minute time limits, so at S = 60 a trace hour is a Slurm minute (the
shipped traces' time limits are whole hours) and every time read back is a multiple of S.

Decisions that Slurm forces (docs/policy-comparison.md says them too):

- **GPU type**: a job that may run on every tier of the cluster asks for `gpu:N` (any type;
  on a node with two types Slurm may give it some of each: that attempt's tier reads
  `rtx4090+rtx5090`); one that may run on a single tier asks `gpu:TYPE:N`; one that may run on
  several but not all asks `gpu:N` and excludes the nodes holding a weaker type.
- **Rejected**: a job no placement fits (SPEC §2, e.g. 8 GPUs where no tier has 8 on one
  node) is not submitted and reads REJECTED, as in the simulator; Slurm itself would run an
  untyped 8-GPU job across node-c's two types.
- **OOM** (`oom_on`): Slurm has no tier escalation. The job runs its duration once; if Slurm
  placed it on one of its `oom_on` tiers, that attempt ends `oom` and the job FAILED (its user
  would have to resubmit by hand), else it COMPLETED.
- **Cancel**: `cancel_time` ≤ `submit_time` is never submitted (CANCELLED, as the simulator
  cancels it before any cycle queues it); otherwise `scancel` at the scaled time.
- **Time limit**: `--time` in whole minutes, `time_limit` (or the duration) scaled and rounded
  up, at least 1 minute.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from jpushare.formats.cluster_file import ClusterSpec
from jpushare.formats.trace_file import TraceJob
from jpushare.policy.fit import check_fit, default_min_sort_order
from jpushare.policy.model import Tier
from jpushare.sim.engine import Attempt, AttemptEnd, SimResult, TraceJobResult, TraceJobState
from jpushare.slurm_peer.sacct import SacctJob

POLICY = "slurm"
PLACEMENT = "multifactor+backfill"


@dataclass(frozen=True, slots=True)
class Request:
    """What to submit for one trace job (None in `plan_requests`' output: not submitted)."""

    job_id: str
    account: str
    gres: str  # `gpu:N` or `gpu:TYPE:N`
    exclude: tuple[str, ...]  # nodes it must not run on
    time_min: int  # --time, whole minutes
    run_s: float  # how long the batch script sleeps (wall seconds)
    submit_at: float  # wall seconds after t0
    cancel_at: float | None  # wall seconds after t0

    def sbatch_args(self, name_prefix: str) -> list[str]:
        """sbatch's options (the batch script comes on stdin)."""
        args = [
            "--parsable",
            f"--job-name={name_prefix}{self.job_id}",
            f"--account={self.account}",
            f"--gres={self.gres}",
            f"--time={self.time_min}",
            "--output=/dev/null",
        ]
        if self.exclude:
            args.append(f"--exclude={','.join(self.exclude)}")
        return args

    def script(self) -> str:
        return f"#!/bin/sh\nexec sleep {self.run_s:.3f}\n"


def account_of(lab: str) -> str:
    """The Slurm account of a lab: Slurm keeps account names in lower case."""
    return lab.lower()


def _min_sort_order(job: TraceJob, tiers: Sequence[Tier]) -> int:
    if job.min_tier is None:
        return default_min_sort_order(tiers)
    return next(t.sort_order for t in tiers if t.name == job.min_tier)


def gres_request(job: TraceJob, cluster: ClusterSpec) -> tuple[str, tuple[str, ...]]:
    """(`--gres`, nodes to exclude) for a job that fits somewhere (see the module's rules)."""
    m = _min_sort_order(job, cluster.tiers)
    allowed = {t.name for t in cluster.tiers if t.auto_assign and t.sort_order >= m}
    present = {p.tier for p in cluster.placements}
    usable = allowed & present
    n = job.num_gpus
    if usable == present:
        return f"gpu:{n}", ()
    if len(usable) == 1:
        return f"gpu:{next(iter(usable))}:{n}", ()
    exclude = tuple(sorted({p.node for p in cluster.placements if p.tier not in allowed}))
    return f"gpu:{n}", exclude


def time_limit_minutes(job: TraceJob, speed: float) -> int:
    """The trace's time limit (or duration) in wall minutes, rounded up, at least 1."""
    return max(1, math.ceil(job.time_limit_s / speed / 60 - 1e-9))


def plan_requests(
    jobs: Sequence[TraceJob], cluster: ClusterSpec, speed: float
) -> dict[str, Request | None]:
    """Per trace job its request, or None when it is not submitted (REJECTED, or cancelled
    at or before its submission)."""
    out: dict[str, Request | None] = {}
    fit_cache: dict[tuple[int, int], bool] = {}
    for job in jobs:
        m = _min_sort_order(job, cluster.tiers)
        ok = fit_cache.get((job.num_gpus, m))
        if ok is None:
            ok = check_fit(job.num_gpus, m, cluster.tiers, cluster.placements).ok
            fit_cache[(job.num_gpus, m)] = ok
        if not ok or (job.cancel_time is not None and job.cancel_time <= job.submit_time):
            out[job.job_id] = None
            continue
        gres, exclude = gres_request(job, cluster)
        out[job.job_id] = Request(
            job_id=job.job_id,
            account=account_of(job.lab),
            gres=gres,
            exclude=exclude,
            time_min=time_limit_minutes(job, speed),
            run_s=job.duration / speed,
            submit_at=job.submit_time / speed,
            cancel_at=None if job.cancel_time is None else job.cancel_time / speed,
        )
    return out


def _tier_label(gpus: Mapping[str, int]) -> str:
    return "+".join(sorted(gpus))


def job_record(
    job: TraceJob,
    request: Request | None,
    record: SacctJob | None,
    tflops: Mapping[str, float],
    t0: float,
    speed: float,
    rejected_reason: str = "",
) -> TraceJobResult:
    """One trace job's result from its sacct record (times back in trace seconds).

    A start Slurm recorded in the second of the submission (whole seconds, floored) counts
    as the submission itself: the wait is never negative."""
    if request is None:  # never submitted: rejected at submission, or cancelled before it
        state = TraceJobState.REJECTED if rejected_reason else TraceJobState.CANCELLED
        return _not_run(job, state, rejected_reason)
    if record is None or not record.ran:
        if record is not None and record.state == "CANCELLED":
            return _not_run(job, TraceJobState.CANCELLED, "")
        return _not_run(job, TraceJobState.QUEUED, "no start recorded by Slurm")
    assert record.start is not None
    start = max(job.submit_time, (record.start - t0) * speed)
    end = max(start, ((record.end if record.end is not None else record.start) - t0) * speed)
    gpus = record.gpus or {"?": job.num_gpus}
    cost = math.fsum(n * tflops.get(t, 0.0) * (end - start) for t, n in gpus.items())
    tier = _tier_label(gpus)
    if record.state == "CANCELLED":
        outcome, state = AttemptEnd.CANCELLED, TraceJobState.CANCELLED
    elif record.state == "COMPLETED" and not (set(gpus) & job.oom_on):
        outcome, state = AttemptEnd.COMPLETED, TraceJobState.COMPLETED
    elif record.state == "COMPLETED":
        outcome, state = AttemptEnd.OOM, TraceJobState.FAILED
    else:  # TIMEOUT, FAILED, NODE_FAIL, …: it ended without finishing its work
        outcome, state = AttemptEnd.CANCELLED, TraceJobState.FAILED
    attempt = Attempt(start, end, record.nodes or "", tier, job.num_gpus, outcome, cost)
    reason = "" if state is not TraceJobState.FAILED else f"Slurm {record.state} on {tier}"
    return TraceJobResult(
        job.job_id,
        job.lab,
        job.num_gpus,
        state,
        job.submit_time,
        (attempt,),
        cost,
        0.0,
        cost,
        reason,
    )


def _not_run(job: TraceJob, state: TraceJobState, reason: str) -> TraceJobResult:
    return TraceJobResult(
        job.job_id, job.lab, job.num_gpus, state, job.submit_time, (), 0.0, 0.0, 0.0, reason
    )


def to_result(
    jobs: Sequence[TraceJob],
    cluster: ClusterSpec,
    requests: Mapping[str, Request | None],
    records: Mapping[str, SacctJob],
    t0: float,
    speed: float,
    wall_s: float = 0.0,
) -> SimResult:
    """The run as the simulator's `SimResult`, so `sim.report` writes jobs.csv and
    summary.json (no reservations, no cycles: Slurm has neither)."""
    tflops = {t.name: t.tflops for t in cluster.tiers}
    out: list[TraceJobResult] = []
    for job in jobs:
        req = requests.get(job.job_id)
        reason = ""
        if req is None:
            m = _min_sort_order(job, cluster.tiers)
            fit = check_fit(job.num_gpus, m, cluster.tiers, cluster.placements)
            reason = "" if fit.ok else fit.message
        out.append(job_record(job, req, records.get(job.job_id), tflops, t0, speed, reason))
    usage = {lab: float(v) for lab, v in cluster.labs.items()}
    for lab in _labs(jobs):
        usage.setdefault(lab, 0.0)
    start_usage = dict(usage)
    for rec in out:
        usage[rec.lab] += rec.billed
    running = math.fsum(a.num_gpus * (a.end - a.start) for r in out for a in r.attempts)
    return SimResult(
        policy=POLICY,
        cycle_s=0.0,
        jobs=tuple(out),
        reservations=(),
        initial_lab_usage=start_usage,
        lab_usage=usage,
        capacity_gpus=cluster.capacity_gpus,
        running_gpu_s=running,
        reserved_gpu_s=0.0,
        gpu_timeline=(),
        lab_timeline=(),
        cycles_run=0,
        cycles_total=0,
        wall_s=wall_s,
        placement=PLACEMENT,
    )


def _labs(jobs: Iterable[TraceJob]) -> list[str]:
    return sorted({j.lab for j in jobs})
