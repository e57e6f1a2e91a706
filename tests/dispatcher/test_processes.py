"""SPEC §5 with real processes: two dispatchers on one database, only one acts; a dispatcher
SIGKILLed between recording and starting, or between starting and confirming, loses no job
and starts none twice once restarted. Both databases."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.dispatcher.crash_points import CRASH_AT_ENV
from jpushare.dispatcher.lock import lock_for
from tests.dispatcher.conftest import init_cluster, wait_for
from tests.dispatcher.processes import Service, executor_runs, service_env, start_service

LEADER = "this process is now the dispatcher"


class World:
    def __init__(self, sessions: sessionmaker[Session], db_url: str, tmp: Path) -> None:
        self.sessions = sessions
        self.db_url = db_url
        self.tmp = tmp
        self.state = tmp / "state"
        self.users = init_cluster(sessions)
        self.services: list[Service] = []

    def start(self, name: str, **extra: str) -> Service:
        env = service_env(self.db_url, self.state, **extra)
        service = start_service(name, env, self.tmp, "--no-api", "--log-level", "INFO")
        self.services.append(service)
        return service

    def submit(self, user: str, num_gpus: int, command: str) -> int:
        with self.sessions.begin() as s:
            return store.submit_job(
                s,
                user_id=self.users[user].id,
                name=f"{user}-{num_gpus}",
                command=command,
                num_gpus=num_gpus,
                now=store.utc_now(),
            ).id

    def job(self, job_id: int) -> store.JobRecord:
        with self.sessions() as s:
            return store.get_job(s, job_id)

    def events(self, job_id: int) -> list[str]:
        with self.sessions() as s:
            return [e.kind for e in store.job_history(s, job_id)]

    def all_done(self, job_ids: list[int]) -> bool:
        with self.sessions() as s:
            return all(store.get_job(s, j).state == "COMPLETED" for j in job_ids)


@pytest.fixture
def world(sessions: sessionmaker[Session], db_url: str, tmp_path: Path) -> Iterator[World]:
    w = World(sessions, db_url, tmp_path)
    yield w
    for service in w.services:
        service.kill()


def test_two_dispatcher_processes_on_one_database_only_one_acts(world: World) -> None:
    first = world.start("first")
    second = world.start("second")
    wait_for(lambda: LEADER in first.log() + second.log(), "one process takes the lock")
    # The lock is taken: a third contender cannot have it.
    assert lock_for(world.db_url).hold() is False

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
