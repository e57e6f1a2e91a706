"""Step 1: which live runs no job wants any more (cancel, requeue), and the busy GPUs when
runs start while the executor is being read."""

from __future__ import annotations

from typing import cast

from sqlalchemy.orm import sessionmaker

from jpushare.dispatcher.cycle_deps import CycleDeps
from jpushare.dispatcher.observe import read_executor
from jpushare.dispatcher.reconcile import ActiveJob, busy_by_placement, stale_runs
from jpushare.executors.base import Executor, GpuGroup, NodeState, RunInfo, RunState
from jpushare.vocabulary import JobState


def run(job_id: str, attempt: int, state: RunState = RunState.RUNNING) -> RunInfo:
    return RunInfo(job_id, attempt, f"{job_id}.{attempt}", state)


CASES: dict[str, tuple[list[RunInfo], dict[str, tuple[str, int]], list[str]]] = {
    "a run of a running job on its attempt is wanted": (
        [run("1", 1)],
        {"1": ("RUNNING", 1)},
        [],
    ),
    "a pending run of a dispatched job is wanted": (
        [run("1", 2, RunState.PENDING)],
        {"1": ("DISPATCHED", 2)},
        [],
    ),
    "a live run of a cancelled job is stale": (
        [run("1", 1)],
        {"1": ("CANCELLED", 1)},
        ["1.1"],
    ),
    "a live run of an older attempt is stale": (
        [run("1", 1)],
        {"1": ("RUNNING", 2)},
        ["1.1"],
    ),
    "a live run of a requeued job is stale": (
        [run("1", 1)],
        {"1": ("GLOBAL_QUEUE_WAIT", 1)},
        ["1.1"],
    ),
    "an ended run is never stale": (
        [run("1", 1, RunState.CANCELLED), run("2", 1, RunState.COMPLETED)],
        {"1": ("CANCELLED", 1), "2": ("FAILED", 1)},
        [],
    ),
    "a run of a job the store does not know is not ours to stop": (
        [run("99", 1)],
        {},
        [],
    ),
}


def test_stale_runs_in_every_case() -> None:
    for name, (runs, jobs, want) in CASES.items():
        got = [r.executor_id for r in stale_runs(runs, jobs)]
        assert got == want, name


class StartsBetweenReads:
    """Slurm's two reads: runs (squeue) and GPUs in use (sinfo), where `used` counts started
    runs only. Both runs are pending at the first read and have started by the second."""

    def __init__(self) -> None:
        self.started = False

    def runs(self) -> list[RunInfo]:
        state = RunState.RUNNING if self.started else RunState.PENDING
        self.started = True
        return [run("1", 1, state), run("2", 1, state)]

    def inventory(self) -> list[GpuGroup]:
        used = 2 if self.started else 0
        self.started = True
        return [GpuGroup("node-a", "rtx4090", 2, used, NodeState.UP)]


def test_runs_that_start_between_the_two_reads_keep_their_gpus_busy() -> None:
    executor = StartsBetweenReads()
    deps = CycleDeps(sessions=sessionmaker(), executor=cast(Executor, executor))  # two reads
    view = read_executor(deps)
    active = [ActiveJob(j, 1, JobState.DISPATCHED, "node-a", "rtx4090", 1, f"{j}.1") for j in "12"]
    by_run = {(r.job_id, r.attempt): r for r in view.runs}
    busy = busy_by_placement(view.inventory, active, by_run)
    assert busy[("node-a", "rtx4090")] >= 2  # both GPUs held: none for the next job
