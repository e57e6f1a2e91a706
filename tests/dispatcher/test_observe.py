"""The pure half of step 1: which live runs no job wants any more (cancel, requeue)."""

from __future__ import annotations

from jpushare.dispatcher.reconcile import stale_runs
from jpushare.executors.base import RunInfo, RunState


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
