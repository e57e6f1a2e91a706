"""Step 1 of a dispatcher cycle, the pure half: what the executor's view means for our jobs
(`dispatcher.observe` is the half that reads and records).

No I/O. Inputs are the executor's inventory and runs and the store's jobs; outputs are the
busy GPUs per placement (what the policy sees), the transitions to record, and the runs
that must be stopped because their job no longer wants them (cancelled through the API,
possibly by another process, or requeued while a run of an older attempt lingers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from jpushare.executors.base import GpuGroup, RunInfo, RunState
from jpushare.vocabulary import ACTIVE_STATES, JobId, JobState


@dataclass(frozen=True, slots=True)
class ActiveJob:
    """A job the executor should know about: DISPATCHED (recorded) or RUNNING."""

    job_id: JobId
    attempt: int
    state: JobState  # DISPATCHED or RUNNING
    node: str
    tier: str
    num_gpus: int
    executor_id: str | None


@dataclass(frozen=True, slots=True)
class Started:
    job_id: JobId
    attempt: int
    executor_id: str
    started_at: float


@dataclass(frozen=True, slots=True)
class Confirmed:
    """A DISPATCHED job whose run exists but whose executor id was never recorded (crash)."""

    job_id: JobId
    attempt: int
    executor_id: str


@dataclass(frozen=True, slots=True)
class RunEnded:
    job_id: JobId
    attempt: int
    state: RunState  # COMPLETED, FAILED, CANCELLED, OOM, NODE_FAIL, TIMEOUT
    started_at: float | None
    ended_at: float
    exit_code: int | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class Missing:
    """A DISPATCHED job the executor has no run for: the dispatcher died before submitting."""

    job_id: JobId
    attempt: int


Transition = Started | Confirmed | RunEnded | Missing


def busy_by_placement(
    inventory: Iterable[GpuGroup],
    active: Iterable[ActiveJob],
    runs: Mapping[tuple[str, int], RunInfo],
) -> dict[tuple[str, str], int]:
    """GPUs research jobs hold per (node, tier), as the policy must see them.

    The executor counts what it has started (foreign jobs included). A job we recorded as
    dispatched but that the executor has not started yet (sbatch pending, or not submitted
    at all after a crash) does not show there, yet its GPUs are promised: count it too, or
    the next cycle would hand the same GPUs to another job.
    """
    busy: dict[tuple[str, str], int] = {}
    for g in inventory:
        key = (g.node, g.gpu_type)  # the executor names GPUs by tier
        busy[key] = busy.get(key, 0) + g.used
    for job in active:
        run = runs.get((job.job_id, job.attempt))
        if run is None or run.state is RunState.PENDING:
            key = (job.node, job.tier)
            busy[key] = busy.get(key, 0) + job.num_gpus
    return busy


def transitions(
    active: Iterable[ActiveJob], runs: Mapping[tuple[str, int], RunInfo], now: float
) -> list[Transition]:
    """What happened to each active job since the last cycle, in job id order."""
    out: list[Transition] = []
    for job in sorted(active, key=lambda j: (j.job_id, j.attempt)):
        run = runs.get((job.job_id, job.attempt))
        if run is None:
            if job.state == JobState.DISPATCHED:
                out.append(Missing(job.job_id, job.attempt))
            else:  # RUNNING but the executor forgot it: treat as lost with its node
                out.append(
                    RunEnded(
                        job.job_id,
                        job.attempt,
                        RunState.NODE_FAIL,
                        None,
                        now,
                        None,
                        "the executor lost track of the run",
                    )
                )
            continue
        if job.state == JobState.DISPATCHED and job.executor_id is None:
            out.append(Confirmed(job.job_id, job.attempt, run.executor_id))
        if run.state.ended:
            out.append(
                RunEnded(
                    job.job_id,
                    job.attempt,
                    run.state,
                    run.started_at,
                    run.ended_at if run.ended_at is not None else now,
                    run.exit_code,
                    run.reason,
                )
            )
        elif run.state is RunState.RUNNING and job.state == JobState.DISPATCHED:
            out.append(
                Started(
                    job.job_id,
                    job.attempt,
                    run.executor_id,
                    run.started_at if run.started_at is not None else now,
                )
            )
    return out


def stale_runs(runs: Iterable[RunInfo], jobs: Mapping[JobId, tuple[str, int]]) -> list[RunInfo]:
    """Live runs whose job does not want them any more: stop these (whole process group).

    `jobs`: job id -> (state, attempts) from the store. A run is stale when it has not ended
    and its job is not DISPATCHED or RUNNING on that very attempt: the job was cancelled
    (the API records the cancel; stopping the run is the dispatcher's), ended, or was
    requeued. Deriving this every cycle from the two sides, rather than from a message,
    makes a cancel survive any crash: the next cycle of any dispatcher stops the run.
    Runs of job ids the store does not know are left alone (not ours to stop).
    """
    out: list[RunInfo] = []
    for run in runs:
        if run.state.ended:
            continue
        known = jobs.get(run.job_id)
        if known is None:
            continue
        state, attempt = known
        if state in ACTIVE_STATES and attempt == run.attempt:
            continue
        out.append(run)
    return sorted(out, key=lambda r: (r.job_id, r.attempt))
