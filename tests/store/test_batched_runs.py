"""The batched starts and ends (`store.batched_runs`) change exactly what the one-by-one
transitions change: the same jobs, the same events, the same lab usage to the last bit."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import text
from sqlalchemy.orm import Session

from jpushare import store
from jpushare.store.batched_runs import RunEnd, RunStart, end_jobs, mark_running_many
from tests.store.conftest import World, at, run_cycle, submit

Rows = dict[str, list[tuple[object, ...]]]


def _rows(s: Session) -> Rows:
    """Jobs, labs and events as they are inside the open transaction (event ids left out:
    a sequence does not roll back)."""
    events = s.execute(
        text("SELECT job_id, at, kind, from_state, to_state, detail FROM job_events ORDER BY id")
    ).all()
    return {
        "jobs": [tuple(r) for r in s.execute(text("SELECT * FROM jobs ORDER BY id")).all()],
        "labs": [tuple(r) for r in s.execute(text("SELECT * FROM labs ORDER BY id")).all()],
        "events": [tuple(r) for r in events],
    }


def _after(world: World, apply: Callable[[Session], object]) -> Rows:
    with world.sessions() as s:
        apply(s)
        s.flush()
        rows = _rows(s)
        s.rollback()
    return rows


def _dispatched(world: World) -> list[int]:
    jobs = [submit(world, world.alice, 1), submit(world, world.bob, 2)]
    jobs += [submit(world, world.alice, 4), submit(world, world.bob, 1)]
    _, recorded = run_cycle(world, 10, {})
    assert sorted(d.job_id for d in recorded.dispatched) == sorted(jobs)
    return jobs


def test_ending_many_runs_at_once_is_ending_them_one_by_one(world: World) -> None:
    a, b, c, d = _dispatched(world)
    with world.sessions.begin() as s:
        assert store.mark_running(s, a, at(20), "run-a", attempt=1)
    ends = [
        RunEnd(a, 1, store.JobState.COMPLETED, at(100), None, 0, None),
        RunEnd(b, 1, store.JobState.FAILED, at(70.25), at(30), 3, "bad\x00line"),
        RunEnd(c, 1, store.JobState.CANCELLED, at(50), at(40), None, "cancelled by slurm"),
        RunEnd(d, 2, store.JobState.COMPLETED, at(60), at(40), 0, None),  # not its attempt
    ]

    def one_by_one(s: Session) -> None:
        for e in ends:
            store.end_job(
                s,
                e.job_id,
                e.state,
                e.ended_at,
                exit_code=e.exit_code,
                reason=e.reason,
                attempt=e.attempt,
                started_at=e.started_at,
            )

    ended: set[int] = set()
    batched = _after(world, lambda s: ended.update(end_jobs(s, ends)))
    assert batched == _after(world, one_by_one)
    assert ended == {a, b, c}
    usage = {r[1]: r[2] for r in batched["labs"]}  # the labs charged something
    assert all(isinstance(u, float) and u > 0 for u in usage.values()), usage
    assert set(usage) == {"alpha", "beta"}


def test_starting_many_runs_at_once_is_starting_them_one_by_one(world: World) -> None:
    a, b, c, _ = _dispatched(world)
    starts = [
        RunStart(a, 1, at(20), "run-a"),
        RunStart(b, 1, at(21.5), None),
        RunStart(c, 2, at(22), "run-c"),  # not its attempt
    ]

    def one_by_one(s: Session) -> None:
        for r in starts:
            store.mark_running(s, r.job_id, r.started_at, r.executor_id, attempt=r.attempt)

    started: set[int] = set()
    batched = _after(world, lambda s: started.update(mark_running_many(s, starts)))
    assert batched == _after(world, one_by_one)
    assert started == {a, b}
