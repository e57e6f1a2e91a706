"""Per-user quotas in `store.submit`, on both backends: active jobs and their stored bytes.

The count runs in the insert's transaction after the user's row is locked, so two
submissions of one user cannot both pass the last free place (the test holds one
transaction open and checks that the other waits for it, then is refused).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import func, select, text

from jpushare import store
from jpushare.run_settings import JobRun
from jpushare.store.quotas import QuotaExceeded, job_bytes
from jpushare.store.schema import Job
from tests.store.conftest import T0, World

WAIT_S = 20.0


def submit(world: World, user: store.UserRecord, **quota: Any) -> int:
    with world.sessions.begin() as s:
        return submit_in(s, user, **quota)


def submit_in(s: Any, user: store.UserRecord, command: str = "true", **quota: Any) -> int:
    job: int = store.submit(
        s,
        user_id=user.id,
        name="q",
        command=command,
        num_gpus=1,
        now=T0,
        run=quota.pop("run", None),
        **quota,
    ).job.id
    return job


def jobs_of(world: World, user: store.UserRecord) -> int:
    with world.sessions() as s:
        return int(s.scalar(select(func.count()).where(Job.user_id == user.id)) or 0)


def test_a_user_at_the_active_job_limit_is_refused_until_one_ends(world: World) -> None:
    first = [submit(world, world.alice, max_active_jobs=3) for _ in range(3)]
    with pytest.raises(QuotaExceeded) as refused:
        submit(world, world.alice, max_active_jobs=3)
    e = refused.value
    assert (e.limit, e.maximum, e.current, e.adding) == ("active_jobs", 3, 3, 1)
    assert "alice has 3 active jobs" in str(e) and "nothing was stored" in str(e)
    assert jobs_of(world, world.alice) == 3
    # another user is not held to alice's jobs
    submit(world, world.bob, max_active_jobs=3)
    # an ended job no longer counts
    with world.sessions.begin() as s:
        store.cancel_job(s, first[0], T0)
    submit(world, world.alice, max_active_jobs=3)
    assert jobs_of(world, world.alice) == 4


def test_the_stored_bytes_of_commands_and_environments_are_bounded(world: World) -> None:
    env = {"BIG": "x" * 10_000}
    run = JobRun(workdir="/tmp", environment=env)
    one = job_bytes("c" * 5_000, env)
    assert one >= 15_000
    limit = 3 * one + 10
    for _ in range(3):
        submit(world, world.alice, command="c" * 5_000, run=run, max_job_bytes=limit)
    with pytest.raises(QuotaExceeded) as refused:
        submit(world, world.alice, command="c" * 5_000, run=run, max_job_bytes=limit)
    e = refused.value
    assert e.limit == "job_bytes" and e.maximum == limit and e.adding == one
    # what the database holds for the three jobs, counted as stored: about 3 x one
    assert 3 * 15_000 <= e.current <= 3 * one + 3 * 100
    # a small job still fits in what is left
    submit(world, world.alice, command="true", max_job_bytes=limit)
    assert jobs_of(world, world.alice) == 4


def test_without_limits_nothing_is_counted(world: World) -> None:
    for _ in range(3):
        submit(world, world.alice)
    assert jobs_of(world, world.alice) == 3


def _waiting_on_a_lock(world: World) -> bool:
    """PostgreSQL: some backend waits for a row lock now."""
    with world.sessions() as s:
        waits = s.execute(
            text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
        ).scalar()
    return bool(waits)


def test_two_submissions_of_one_user_cannot_both_take_the_last_place(world: World) -> None:
    submit(world, world.alice, max_active_jobs=2)
    postgres = world.sessions.kw["bind"].dialect.name == "postgresql"
    outcome: list[object] = []

    def second() -> None:
        try:
            outcome.append(submit(world, world.alice, max_active_jobs=2))
        except QuotaExceeded as exc:
            outcome.append(exc)

    with world.sessions.begin() as s:
        submit_in(s, world.alice, max_active_jobs=2)  # the last place, not committed yet
        thread = threading.Thread(target=second)
        thread.start()
        # The second submission must wait for this transaction (PostgreSQL: the user's row
        # lock; SQLite: BEGIN IMMEDIATE). Without the lock it would count one job and pass.
        deadline = time.monotonic() + WAIT_S
        while thread.is_alive() and time.monotonic() < deadline:
            if postgres and _waiting_on_a_lock(world):
                break
            thread.join(0.05 if postgres else 0.5)
            if not postgres:
                break
    thread.join(WAIT_S)
    assert not thread.is_alive()
    (result,) = outcome
    assert isinstance(result, QuotaExceeded), f"both passed: job {result}"
    assert result.current == 2
    assert jobs_of(world, world.alice) == 2
