"""Concurrency safety of transitions: two writers racing on the same jobs, each with its own
connection and transaction, never double-dispatch, double-charge or lose an update.

Threads are enough here: each holds its own database connection, and the database (row
locks on PostgreSQL, the BEGIN IMMEDIATE write lock on SQLite) is what serializes them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest
from sqlalchemy.orm import Session

from jpushare import store
from jpushare.policy import decide
from tests.store.conftest import ALL_BUSY, World, at, submit

T = TypeVar("T")
FREE = {**ALL_BUSY, ("node-a", "rtx3080ti"): 0, ("node-c", "rtx5090"): 0}


def race(world: World, *work: Callable[[Session], T]) -> list[T]:
    """Run each function in its own thread and transaction, released together."""
    barrier = threading.Barrier(len(work))

    def run(fn: Callable[[Session], T]) -> T:
        with world.sessions() as s:
            barrier.wait()
            with s.begin():
                return fn(s)

    with ThreadPoolExecutor(len(work)) as pool:
        return [f.result(timeout=60) for f in [pool.submit(run, fn) for fn in work]]


def test_two_dispatchers_recording_the_same_decisions_dispatch_each_job_once(
    world: World,
) -> None:
    jobs = [submit(world, world.alice, 1, seconds=i) for i in range(6)]
    with world.sessions.begin() as s:
        decisions = decide(store.load_snapshot(s, at(10), FREE))
    assert len(decisions.dispatches()) == 6

    results = race(
        world,
        lambda s: store.record_decisions(s, decisions, at(10)),
        lambda s: store.record_decisions(s, decisions, at(10)),
    )
    dispatched = sorted(d.job_id for r in results for d in r.dispatched)
    assert dispatched == jobs  # each exactly once, all by one of the two
    assert sorted(len(r.dispatched) for r in results) == [0, 6]
    with world.sessions.begin() as s:
        for job_id in jobs:
            job = store.get_job(s, job_id)
            assert (job.state, job.attempts) == ("DISPATCHED", 1)
            kinds: list[str] = [e.kind for e in store.job_history(s, job_id)]
            assert kinds.count("dispatched") == 1


def test_two_reports_of_the_same_end_charge_the_lab_once(world: World) -> None:
    job = submit(world, world.bob, 4, min_tier="rtx5090")
    with world.sessions.begin() as s:
        store.record_decisions(s, decide(store.load_snapshot(s, at(5), FREE)), at(5))
        store.mark_running(s, job, at(5), "e")

    def end(s: Session) -> store.AttemptEnded | None:
        return store.end_job(s, job, store.JobState.COMPLETED, at(15), exit_code=0, attempt=1)

    results = race(world, end, end, end)
    assert sum(r is not None for r in results) == 1
    with world.sessions.begin() as s:
        assert store.get_lab(s, "beta").cumulative_usage == pytest.approx(4 * 10 * 104.8)
        kinds: list[str] = [e.kind for e in store.job_history(s, job)]
    assert kinds.count("completed") == 1 and kinds.count("charged") == 1


def test_cancel_racing_a_dispatch_leaves_one_consistent_outcome(world: World) -> None:
    job = submit(world, world.alice, 1)
    with world.sessions.begin() as s:
        decisions = decide(store.load_snapshot(s, at(5), FREE))

    def cancel(s: Session) -> str:
        return store.cancel_job(s, job, at(5)).previous_state

    def record(s: Session) -> int:
        return len(store.record_decisions(s, decisions, at(5)).dispatched)

    previous, dispatched = race(world, cancel, record)
    with world.sessions.begin() as s:
        final = store.get_job(s, job)
    assert final.state == "CANCELLED"
    # Either the cancel came first (the dispatch was skipped) or the dispatch did (the
    # cancel then names the run to stop): never a dispatched-and-cancelled-and-lost job.
    assert (previous, dispatched) in {("GLOBAL_QUEUE_WAIT", 0), ("DISPATCHED", 1)}


def test_many_concurrent_charges_to_one_lab_all_arrive(world: World) -> None:
    jobs = [submit(world, world.alice, 1, seconds=i) for i in range(4)]
    free = {**FREE, ("node-b", "rtx4090"): 0}
    with world.sessions.begin() as s:
        recorded = store.record_decisions(s, decide(store.load_snapshot(s, at(5), free)), at(5))
        assert {d.job_id for d in recorded.dispatched} == set(jobs)
        for job_id in jobs:
            store.mark_running(s, job_id, at(5))

    def ender(job_id: int) -> Callable[[Session], store.AttemptEnded | None]:
        return lambda s: store.end_job(s, job_id, store.JobState.COMPLETED, at(105))

    race(world, *[ender(j) for j in jobs])
    with world.sessions.begin() as s:
        bills = sum(store.get_job(s, j).bill for j in jobs)
        assert store.get_lab(s, "alpha").cumulative_usage == pytest.approx(bills)
    assert bills > 0
