"""Step 1 of a dispatcher cycle: observe the executor and record what it says.

1. `read_executor`: the runs and the inventory (no transaction open); for a started job
   whose run the executor no longer lists, what became of it, if the executor can say
   (`resolve_lost_runs`).
2. `record_observation`, ONE transaction: sync the inventory and node states (when they
   changed, `InventoryMemo`), record every run transition with its charge
   (`run_transitions`: RUNNING from the executor's start time; COMPLETED / FAILED / CANCELLED /
   TIMEOUT end the job and charge its lab; OOM requeues with escalation; NODE_FAIL
   requeues), settle the runs of cancelled jobs that have now really ended, confirm runs
   whose id was never recorded, and store the busy GPUs per placement for the API.
3. `stop_stale_runs`, outside it: stop runs whose job no longer wants them (a cancel the
   API recorded). The jobs recorded DISPATCHED that the executor has no run for (a crash
   between record and submit) are `Observed.resubmit`: the cycle launches them again.

What the executor's view means (transitions, busy GPUs, stale runs) is decided by the pure
`dispatcher.reconcile`; this module reads and writes around it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from jpushare import store
from jpushare.dispatcher.cycle_deps import CycleDeps, InventoryMemo
from jpushare.dispatcher.job_ids import job_id, row_id
from jpushare.dispatcher.reconcile import (
    ActiveJob,
    busy_by_placement,
    stale_runs,
    transitions,
)
from jpushare.dispatcher.run_transitions import RunChange, record_transitions, settle_cancelled_runs
from jpushare.executors.base import GpuGroup, ResolvesLostRuns, RunInfo
from jpushare.store.observations import (
    active_jobs,
    dispatched_launches,
    job_states,
    save_observed_busy,
)
from jpushare.store.records import DispatchedJob
from jpushare.vocabulary import JobId, JobState

log = logging.getLogger(__name__)

Busy = dict[tuple[str, str], int]


@dataclass(frozen=True, slots=True)
class ExecutorView:
    """What the executor said this cycle."""

    inventory: list[GpuGroup]
    runs: list[RunInfo]  # with the lost runs it could resolve


@dataclass(frozen=True, slots=True)
class Observed:
    """What step 1 saw and did."""

    busy: Busy
    started: int = 0
    confirmed: int = 0
    ended: int = 0
    requeued: int = 0
    resubmit: tuple[DispatchedJob, ...] = ()
    stale: tuple[RunInfo, ...] = ()


def read_executor(deps: CycleDeps) -> ExecutorView:
    """The executor's runs, then its inventory; raises whatever the executor raises.

    Runs first: the two reads are not one instant (squeue, then sinfo), and a run that
    starts between them must not vanish from the busy count. Read runs-then-inventory, it
    shows as PENDING (counted from the job) and as used (counted twice: a cycle's delay at
    worst). Read the other way round, it showed as RUNNING and not yet used: counted
    nowhere, so its GPUs went to the next job in the queue.
    """
    runs = deps.executor.runs()
    inventory = deps.executor.inventory()
    return ExecutorView(inventory, runs + resolve_lost_runs(deps, runs))


def resolve_lost_runs(deps: CycleDeps, runs: list[RunInfo]) -> list[RunInfo]:
    """What became of the runs of started jobs that `runs` does not list (executors that
    can tell: `ResolvesLostRuns`; others' missing runs stay a node failure / a resubmit).

    A Slurm job that ended while the dispatcher was down for longer than `MinJobAge` is
    gone from squeue. Requeueing it as a node failure could run a completed job twice;
    the executor answers from its accounting, or with FAILED "outcome unknown". Only jobs
    with a recorded executor id are asked about: one DISPATCHED without an id crashed
    between its record and its sbatch's confirmation and is submitted again (idempotent
    by job name, unless it also ended more than `MinJobAge` ago: not covered).
    """
    executor = deps.executor
    if not isinstance(executor, ResolvesLostRuns):
        return []
    known = {(r.job_id, r.attempt) for r in runs}
    with deps.sessions() as session:
        active = _active_jobs(session)
    out: list[RunInfo] = []
    for job in active:
        if job.executor_id is None or (job.job_id, job.attempt) in known:
            continue
        info = executor.lost_run(job.job_id, job.attempt, job.executor_id)
        log.warning(
            "job %s attempt %d: its run %s is gone from the executor's list; it reports %s: %s",
            job.job_id,
            job.attempt,
            job.executor_id,
            info.state.value,
            info.reason,
        )
        out.append(info)
    return out


def record_observation(deps: CycleDeps, seen: ExecutorView, now: datetime) -> Observed:
    """Apply the executor's view to the store in one transaction (module docstring, 2)."""
    runs = seen.runs
    by_key = {(r.job_id, r.attempt): r for r in runs}
    inventory = seen.inventory  # tier names: the executor maps its own GPU types
    with deps.begin() as session:
        facts, mono = InventoryMemo.facts(inventory), time.monotonic()
        sync = deps.inventory_memo.needs_sync(facts, mono)
        if sync:
            store.sync_inventory(session, inventory, now, mark_missing_down=True)
        found = transitions(_active_jobs(session), by_key, store.to_epoch(now))
        changes = record_transitions(session, found, now)
        settle_cancelled_runs(session, runs)
        # Busy GPUs as the policy must see them, from the jobs still active now.
        busy = busy_by_placement(inventory, _active_jobs(session), by_key)
        save_observed_busy(session, busy, now)
        stale = stale_runs(runs, _run_owners(session, runs))
        resubmit = dispatched_launches(session, _row_ids(changes.missing))
    if sync:
        deps.inventory_memo.synced(facts, mono)
    counts = changes.counts
    return Observed(
        busy,
        started=counts[RunChange.STARTED],
        confirmed=counts[RunChange.CONFIRMED],
        ended=counts[RunChange.ENDED],
        requeued=counts[RunChange.REQUEUED],
        resubmit=tuple(resubmit),
        stale=tuple(stale),
    )


def stop_stale_runs(deps: CycleDeps, stale: Iterable[RunInfo]) -> tuple[str, ...]:
    """Stop runs whose job was cancelled, ended or requeued (idempotent; errors logged)."""
    stopped: list[str] = []
    for run in stale:
        deps.check_may_act()
        try:
            deps.executor.cancel(run.executor_id)
        except Exception as exc:  # retried next cycle: the run is still stale then
            log.warning("could not stop run %s of job %s: %s", run.executor_id, run.job_id, exc)
            continue
        log.info("stopped run %s: job %s no longer wants it", run.executor_id, run.job_id)
        stopped.append(run.executor_id)
    return tuple(stopped)


def _active_jobs(session: Session) -> list[ActiveJob]:
    return [
        ActiveJob(job_id(r.job_id), r.attempt, r.state, r.node, r.tier, r.num_gpus, r.executor_id)
        for r in active_jobs(session)
    ]


def _row_ids(job_ids: Iterable[str]) -> list[int]:
    return [i for i in map(row_id, job_ids) if i is not None]  # None: not one of ours


def _run_owners(session: Session, runs: Iterable[RunInfo]) -> dict[JobId, tuple[JobState, int]]:
    """Job id -> (state, attempts) of the runs' jobs the store knows."""
    states = job_states(session, _row_ids(r.job_id for r in runs))
    return {job_id(row): state for row, state in states.items()}
