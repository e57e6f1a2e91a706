"""A leader that is frozen or cut off from the database while its connection lives is
replaced, and once it wakes it records and starts nothing. Real processes.

- Frozen at a known point of its cycle (`JPUSHARE_CRASH_AT=<point>` with
  `JPUSHARE_CRASH_SIGNAL=STOP`: the process SIGSTOPs itself there): after its observation
  was committed (it wakes into the recording transaction: that transaction rolls back), or
  after its decisions were committed (it wakes before its submit: it starts nothing, the
  new leader submits the job). Both databases.
- Frozen inside its recording transaction (`in_record`: decisions written, not committed,
  the jobs' rows locked): the server ends that transaction once it has idled for the
  lease's length, the standby (which waited on those rows) dispatches the job, and the
  old leader wakes to a closed connection. PostgreSQL only (a SQLite leader frozen there
  holds the database's write lock: see `dispatcher.lock`).
- Frozen from outside at whatever point it happened to be (`kill -STOP`): PostgreSQL only,
  because a SQLite leader frozen inside a write transaction holds the database's single
  write lock and nothing can take it from it (see `dispatcher.lock`). Likewise a leader
  frozen inside a call to the local executor holds that executor's file lock (one machine,
  one state directory), which the standby's next call waits for: the test stops the
  leader again until it is stopped outside that lock (`stop_outside_executor_lock`).
- Cut off by a TCP proxy that stops forwarding while keeping its connections open:
  PostgreSQL only (SQLite has no connection to cut).

Each checks, from the executor's own records, that no job started twice, and that the old
leader steps down. `JPUSHARE_LEASE_S` is 3 s (tests/dispatcher/processes.py); the time a
standby took to dispatch is printed, not asserted (no timed tests).
"""

from __future__ import annotations

import fcntl
import signal
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from jpushare.dispatcher.crash_points import CRASH_AT_ENV, CRASH_SIGNAL_ENV
from tests.dispatcher.conftest import wait_for
from tests.dispatcher.processes import LEADER, Service, World, executor_runs
from tests.dispatcher.stall_proxy import StallProxy

LOST = "dispatcher lease lost"
STARTED = "started on"


def is_stopped(pid: int) -> bool:
    """Whether the process is stopped by a signal (state T in /proc)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] in "Tt"


def stop_outside_executor_lock(service: Service, state: Path) -> int:
    """SIGSTOP `service` at a moment it does not hold the local executor's file lock;
    how many stops that took."""
    lock = state / "executor" / "lock"
    for tries in range(1, 100):
        service.proc.send_signal(signal.SIGSTOP)
        wait_for(lambda: is_stopped(service.proc.pid), "the leader stops")
        with lock.open("a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                service.proc.send_signal(signal.SIGCONT)
                time.sleep(0.05)  # let it leave the executor call: pacing, not a sync
                continue
            fcntl.flock(f, fcntl.LOCK_UN)
            return tries
    pytest.fail("the leader was inside the executor's lock at every stop")


def ran_once_each(world: World, marks: Path, jobs: list[int]) -> None:
    """Every job ran exactly once, as one run of attempt 1, dispatched once."""
    assert executor_runs(world.state) == sorted((str(j), 1) for j in jobs)
    assert sorted(int(x) for x in marks.read_text().split()) == sorted(jobs)
    for j in jobs:
        events = world.events(j)
        assert events.count("dispatched") == 1 and events.count("completed") == 1, events
        assert world.job(j).attempts == 1


def command(marks: Path) -> str:
    return f"echo $JPUSHARE_JOB_ID >> {marks}"


def wake_and_step_down(world: World, old: Service, marks: Path, jobs: list[int]) -> None:
    """SIGCONT the old leader; it steps down, and a later job is still run once, by the
    new leader."""
    old.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: LOST in old.log(), "the old leader finds its lease taken")
    late = world.submit("bob", 1, command(marks))
    wait_for(lambda: world.all_done([late]), "the new leader runs a job submitted later")
    assert old.proc.poll() is None, old.log()  # alive, standing by
    ran_once_each(world, marks, [*jobs, late])


@pytest.mark.parametrize("point", ["after_observe", "after_record"])
def test_a_leader_frozen_mid_cycle_is_replaced_and_records_nothing_when_it_wakes(
    world: World, point: str
) -> None:
    marks = world.tmp / "ran"
    # after_record is reached only by a cycle that dispatches: give it a job first.
    jobs = [world.submit("alice", 1, command(marks))] if point == "after_record" else []
    frozen = world.start("frozen", **{CRASH_AT_ENV: point, CRASH_SIGNAL_ENV: "STOP"})
    wait_for(lambda: is_stopped(frozen.proc.pid), f"the leader freezes at {point}")
    assert LEADER in frozen.log()
    began = time.monotonic()
    standby = world.start("standby")
    jobs.append(world.submit("bob", 1, command(marks)))
    wait_for(lambda: world.all_done(jobs), "the standby takes over and runs the jobs")
    print(f"\n{point}: the standby ran the jobs {time.monotonic() - began:.2f} s after it started")
    assert LEADER in standby.log()

    wake_and_step_down(world, frozen, marks, jobs)
    text = frozen.log()
    assert STARTED not in text, text
    if point == "after_observe":
        assert "cycle abandoned, nothing recorded" in text, text
    if point == "after_record":
        # Its decision stood (committed before the freeze); the standby submitted it.
        assert "resubmitted 1" in standby.log()


def test_a_leader_frozen_inside_its_recording_transaction_is_cut_off_by_the_server(
    pg_world: World,
) -> None:
    world = pg_world
    marks = world.tmp / "ran"
    job = world.submit("alice", 1, command(marks))
    frozen = world.start("frozen", **{CRASH_AT_ENV: "in_record", CRASH_SIGNAL_ENV: "STOP"})
    wait_for(lambda: is_stopped(frozen.proc.pid), "the leader freezes inside its transaction")
    began = time.monotonic()
    standby = world.start("standby")
    wait_for(lambda: world.all_done([job]), "the standby takes over and runs the job")
    print(f"\nin_record: the standby ran the job {time.monotonic() - began:.2f} s after it started")
    assert LEADER in standby.log()

    wake_and_step_down(world, frozen, marks, [job])
    text = frozen.log()
    assert STARTED not in text, text
    assert "idle-in-transaction timeout" in text, text  # what the server told it


def _leader_and_standby(world: World, leader_url: str | None = None) -> tuple[Service, Service]:
    leader = world.start("leader", db_url=leader_url)
    wait_for(lambda: LEADER in leader.log(), "the first process leads")
    standby = world.start("standby")
    wait_for(lambda: "dispatcher loop" in standby.log(), "the second process stands by")
    return leader, standby


def test_a_leader_stopped_from_outside_is_replaced_and_steps_down_when_continued(
    pg_world: World,
) -> None:
    world = pg_world
    marks = world.tmp / "ran"
    leader, standby = _leader_and_standby(world)
    first = world.submit("alice", 1, command(marks))
    wait_for(lambda: world.all_done([first]), "the leader runs a job")

    stop_outside_executor_lock(leader, world.state)
    began = time.monotonic()
    second = world.submit("bob", 1, command(marks))
    wait_for(lambda: world.all_done([second]), "the standby takes over and runs the job")
    print(f"\nSIGSTOP: the standby ran the job {time.monotonic() - began:.2f} s after the stop")
    assert LEADER in standby.log()
    wake_and_step_down(world, leader, marks, [first, second])
    assert f"job {second} attempt 1 {STARTED}" not in leader.log()


def test_a_leader_cut_off_by_a_stalled_network_is_replaced_and_steps_down_when_it_flows(
    pg_world: World,
) -> None:
    world = pg_world
    url = make_url(world.db_url)
    proxy = StallProxy(url.port or 5432)
    try:
        through_proxy = url.set(port=proxy.port).render_as_string(hide_password=False)
        marks = world.tmp / "ran"
        leader, standby = _leader_and_standby(world, through_proxy)
        first = world.submit("alice", 1, command(marks))
        wait_for(lambda: world.all_done([first]), "the leader runs a job")

        proxy.stall()
        began = time.monotonic()
        second = world.submit("bob", 1, command(marks))
        wait_for(lambda: world.all_done([second]), "the standby takes over and runs the job")
        print(f"\nstall: the standby ran the job {time.monotonic() - began:.2f} s after it")
        assert LEADER in standby.log()
        assert leader.proc.poll() is None

        proxy.resume()
        wait_for(lambda: LOST in leader.log(), "the old leader finds its lease taken")
        late = world.submit("bob", 1, command(marks))
        wait_for(lambda: world.all_done([late]), "the new leader runs a job submitted later")
        ran_once_each(world, marks, [first, second, late])
        assert f"job {second} attempt 1 {STARTED}" not in leader.log()
    finally:
        proxy.close()
