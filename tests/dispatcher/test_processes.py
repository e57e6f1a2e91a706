"""SPEC §5 with real processes: two dispatchers on one database, only one acts; a dispatcher
SIGKILLed between recording and starting, or between starting and confirming, loses no job
and starts none twice once restarted. Both databases."""

from __future__ import annotations

import pytest

from jpushare import store
from jpushare.dispatcher.crash_points import CRASH_AT_ENV
from jpushare.dispatcher.lock import lock_for
from tests.dispatcher.conftest import wait_for
from tests.dispatcher.processes import LEADER, World, executor_runs


def test_two_dispatcher_processes_on_one_database_only_one_acts(world: World) -> None:
    first = world.start("first")
    second = world.start("second")
    wait_for(lambda: LEADER in first.log() + second.log(), "one process takes the lock")
    # The lock is taken: a third contender cannot have it.
    third = lock_for(world.db_url, lease_s=3.0)
    try:
        assert third.hold() is False
    finally:
        third.release()

    marks = world.tmp / "ran"
    jobs = [
        world.submit("alice" if i % 2 else "bob", 1, f"echo $JPUSHARE_JOB_ID >> {marks}; sleep 0.2")
        for i in range(6)
    ]
    jobs.append(world.submit("alice", 2, f"echo $JPUSHARE_JOB_ID >> {marks}"))
    wait_for(lambda: world.all_done(jobs), "every job completes")

    logs = {s.name: s.log() for s in (first, second)}
    leaders = [name for name, text in logs.items() if LEADER in text]
    assert len(leaders) == 1, logs
    standby = "second" if leaders == ["first"] else "first"
    assert "started on" not in logs[standby] and "cycle:" not in logs[standby]
    assert executor_runs(world.state) == sorted((str(j), 1) for j in jobs)
    assert sorted(int(x) for x in marks.read_text().split()) == sorted(jobs)
    for j in jobs:
        assert world.events(j).count("dispatched") == 1
        assert world.job(j).attempts == 1

    # The leader dies; the standby takes over within a cycle and goes on.
    leader, other = (first, second) if leaders == ["first"] else (second, first)
    leader.kill()
    late = world.submit("bob", 1, f"echo $JPUSHARE_JOB_ID >> {marks}")
    wait_for(lambda: world.all_done([late]), "the standby runs the next job")
    assert LEADER in other.log()
    assert executor_runs(world.state).count((str(late), 1)) == 1


@pytest.mark.parametrize("point", ["after_record", "after_submit"])
def test_a_dispatcher_killed_mid_dispatch_neither_loses_nor_doubles_the_job(
    world: World, point: str
) -> None:
    crashing = world.start("crashing", **{CRASH_AT_ENV: point})
    marks = world.tmp / "ran"
    job_id = world.submit("alice", 1, f"echo $JPUSHARE_ATTEMPT >> {marks}; sleep 0.3")
    code = crashing.wait_exit(f"the dispatcher kills itself at {point}")
    assert code == -9, crashing.log()
    assert f"{CRASH_AT_ENV}={point}" in crashing.log()

    job = world.job(job_id)
    assert (job.state, job.attempts, job.executor_id) == ("DISPATCHED", 1, None)
    if point == "after_record":
        assert executor_runs(world.state) == []  # recorded, never submitted
    else:
        assert executor_runs(world.state) == [(str(job_id), 1)]  # submitted, not confirmed

    restarted = world.start("restarted")
    wait_for(lambda: world.all_done([job_id]), "the restarted dispatcher finishes the job")
    assert executor_runs(world.state) == [(str(job_id), 1)]  # one run, one attempt
    assert marks.read_text().split() == ["1"]  # the command ran exactly once
    events = world.events(job_id)
    assert events.count("dispatched") == 1 and events.count("completed") == 1
    run_cost = world.job(job_id).run_cost
    with world.sessions() as s:
        assert store.get_lab(s, "alpha").cumulative_usage == pytest.approx(run_cost)
    assert restarted.stop() == 0
