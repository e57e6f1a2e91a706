"""Holds, dependencies and array throttles in the store (SQLite and PostgreSQL): a job not
eligible is not in the snapshot's queue; it enters it, with that moment as its queue entry
time, in the cycle that finds it eligible."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from jpushare import store
from jpushare.policy import decide
from jpushare.run_settings import JobRun
from jpushare.store.schema import Job
from tests.store.conftest import ALL_BUSY, World, at


def store_run(**fields: object) -> JobRun:
    """How a test job runs: in /tmp, with `fields`."""
    return JobRun(workdir="/tmp", **fields)  # type: ignore[arg-type]


def _submit(
    world: World, seconds: float = 0.0, name: str = "step", **elig: object
) -> store.Submission:
    with world.sessions.begin() as s:
        return store.submit(
            s,
            user_id=world.alice.id,
            name=name,
            command="python step.py",
            num_gpus=1,
            now=at(seconds),
            eligibility=store.Eligibility(**elig),  # type: ignore[arg-type]
        )


def _queue(world: World, seconds: float) -> list[int]:
    """One cycle's first half: refresh the waiting jobs, then the snapshot's queue ids."""
    with world.sessions.begin() as s:
        done = store.refresh_waiting(s, at(seconds))
        for job_id, why in done.to_cancel:
            store.cancel_job(s, job_id, at(seconds), reason=why)
        snap = store.load_snapshot(s, at(seconds), ALL_BUSY)
    return sorted(int(j.job_id) for j in snap.queue)


def _job(world: World, job_id: int) -> store.JobRecord:
    with world.sessions.begin() as s:
        return store.get_job(s, job_id)


def _end(world: World, job_id: int, state: store.JobState, seconds: float) -> None:
    """End a queued job as if it had run (the states are what dependencies read)."""
    with world.sessions.begin() as s:
        if state is store.JobState.CANCELLED:
            store.cancel_job(s, job_id, at(seconds))
        else:
            s.execute(
                update(Job).where(Job.id == job_id).values(state=state.value, ended_at=at(seconds))
            )


def test_afterok_waits_outside_the_queue_and_enters_it_when_met(world: World) -> None:
    first = _submit(world).job
    second = _submit(world, 1, dependency=f"afterok:{first.id}").job
    assert second.waiting == "DEPENDENCY" and second.dependency == f"afterok:{first.id}"
    assert _queue(world, 2) == [first.id]
    _end(world, first.id, store.JobState.COMPLETED, 50)
    assert _queue(world, 60) == [second.id]
    job = _job(world, second.id)
    assert job.waiting is None
    assert job.queue_entered_at == at(60)  # its entry time is when it became eligible
    with world.sessions.begin() as s:
        kinds = [e.kind for e in store.job_history(s, second.id)]
    assert kinds == ["submitted", "eligible"]


def test_afterok_on_a_failed_job_is_never_satisfied_or_cancelled(world: World) -> None:
    first = _submit(world).job
    stays = _submit(world, 1, dependency=f"afterok:{first.id}").job
    killed = _submit(world, 1, dependency=f"afterok:{first.id}", kill_on_invalid_dep=True).job
    _end(world, first.id, store.JobState.FAILED, 10)
    assert _queue(world, 20) == []
    assert _job(world, stays.id).waiting == "DEPENDENCY_NEVER_SATISFIED"
    gone = _job(world, killed.id)
    assert gone.state is store.JobState.CANCELLED
    assert gone.reason is not None and "can never be met" in gone.reason
    _queue(world, 30)  # a later cycle leaves the never-met job as it is
    assert _job(world, stays.id).waiting == "DEPENDENCY_NEVER_SATISFIED"


def test_afternotok_afterany_after_and_any_of(world: World) -> None:
    a = _submit(world).job
    b = _submit(world).job
    notok = _submit(world, 1, dependency=f"afternotok:{a.id}").job
    anyend = _submit(world, 1, dependency=f"afterany:{a.id}:{b.id}").job
    either = _submit(world, 1, dependency=f"afterok:{a.id}?afterok:{b.id}").job
    assert _queue(world, 2) == [a.id, b.id]
    _end(world, a.id, store.JobState.CANCELLED, 10)
    assert _queue(world, 11) == [b.id, notok.id]
    assert _job(world, either.id).waiting == "DEPENDENCY"  # b may still complete
    _end(world, b.id, store.JobState.COMPLETED, 20)
    assert _queue(world, 21) == [notok.id, anyend.id, either.id]


def test_a_dependency_met_at_submit_is_eligible_at_once(world: World) -> None:
    a = _submit(world).job
    _end(world, a.id, store.JobState.COMPLETED, 5)
    job = _submit(world, 6, dependency=f"afterany:{a.id}").job
    assert job.waiting is None and job.queue_entered_at == at(6)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("afterok:999", "no job 999"),
        ("afterwards:1", "TYPE"),
        ("afterok:", "name jobs"),
        ("afterok:1,afterok:2?afterok:3", "not both"),
    ],
)
def test_a_bad_dependency_is_refused_and_nothing_stored(
    world: World, text: str, words: str
) -> None:
    _submit(world)
    with pytest.raises(store.InvalidRequest, match=words):
        _submit(world, dependency=text)
    with world.sessions.begin() as s:
        assert store.job_count(s) == 1


def test_hold_release_and_entry_time(world: World) -> None:
    held = _submit(world, hold=True).job
    assert held.waiting == "HELD" and held.held
    assert _queue(world, 1) == []
    with world.sessions.begin() as s:
        released = store.release_job(s, held.id, at(30), by="alice")
    assert released.waiting is None and released.queue_entered_at == at(30)
    assert _queue(world, 31) == [held.id]
    with world.sessions.begin() as s:
        again = store.hold_job(s, held.id, at(40), by="alice")
    assert again.waiting == "HELD"
    assert _queue(world, 41) == []
    with world.sessions.begin() as s:
        kinds = [e.kind for e in store.job_history(s, held.id)]
    assert kinds == ["submitted", "hold_released", "eligible", "held"]


def test_a_held_job_with_an_unmet_dependency_waits_for_it_after_release(world: World) -> None:
    a = _submit(world).job
    job = _submit(world, hold=True, dependency=f"afterok:{a.id}").job
    with world.sessions.begin() as s:
        assert store.release_job(s, job.id, at(5), by="alice").waiting == "DEPENDENCY"


def test_hold_releases_a_reservation_and_a_held_job_is_not_dispatched(world: World) -> None:
    with world.sessions.begin() as s:
        big = store.submit(
            s, user_id=world.bob.id, name="big", command="x", num_gpus=4, now=at(0)
        ).job
    partly = {**ALL_BUSY, ("node-b", "rtx4090"): 2}
    with world.sessions.begin() as s:
        snap = store.load_snapshot(s, at(5), partly)
        decisions = decide(snap)
        store.record_decisions(s, decisions, at(5))
    assert _job(world, big.id).reserved_gpus == 2
    with world.sessions.begin() as s:
        held = store.hold_job(s, big.id, at(15), by="bob")
    assert held.reserved_gpus == 0 and held.reservation_cost_tflop_s > 0
    # A decision made before the hold (a stale snapshot) dispatches nothing.
    with world.sessions.begin() as s:
        recorded = store.record_decisions(s, decisions, at(16))
    assert recorded.dispatched == ()


def test_hold_and_update_refuse_a_job_that_left_the_queue(world: World) -> None:
    a = _submit(world).job
    _end(world, a.id, store.JobState.COMPLETED, 5)
    with world.sessions.begin() as s, pytest.raises(store.InvalidTransition):
        store.hold_job(s, a.id, at(6), by="alice")
    with world.sessions.begin() as s, pytest.raises(store.InvalidTransition):
        store.update_job(s, a.id, at(6), by="alice", name="x")


def test_update_changes_name_and_time_limit_while_queued(world: World) -> None:
    a = _submit(world).job
    with world.sessions.begin() as s:
        job = store.update_job(s, a.id, at(3), by="alice", name="renamed", time_limit_s=600)
    assert (job.name, job.time_limit_s) == ("renamed", 600)
    with world.sessions.begin() as s, pytest.raises(store.InvalidRequest):
        store.update_job(s, a.id, at(3), by="alice", time_limit_s=-1)


def test_singleton_runs_one_job_of_a_name_at_a_time(world: World) -> None:
    a = _submit(world, name="nightly", dependency="singleton").job
    b = _submit(world, 1, name="nightly", dependency="singleton").job
    assert a.waiting is None  # nothing else of that name
    assert b.waiting == "DEPENDENCY"
    assert _queue(world, 2) == [a.id]
    _end(world, a.id, store.JobState.COMPLETED, 10)
    assert _queue(world, 11) == [b.id]


def test_an_array_makes_one_job_per_task_and_throttles_them(world: World) -> None:
    done = _submit(world, array_tasks=(1, 3, 5, 7), array_limit=2)
    tasks = done.tasks
    assert [t.display_id for t in tasks] == [f"{tasks[0].id}_{n}" for n in (1, 3, 5, 7)]
    assert {t.array_job_id for t in tasks} == {tasks[0].id}
    assert [t.waiting for t in tasks] == [None, None, "ARRAY_LIMIT", "ARRAY_LIMIT"]
    assert _queue(world, 1) == [tasks[0].id, tasks[1].id]
    _end(world, tasks[0].id, store.JobState.COMPLETED, 10)
    assert _queue(world, 11) == [tasks[1].id, tasks[2].id]
    with world.sessions.begin() as s:
        verdict = store.waiting_verdict(s, tasks[3].id)
    assert verdict is not None and verdict.waits_for == "array limit: 2 of 2 running"


def test_a_dependency_on_an_array_names_every_task_or_one(world: World) -> None:
    tasks = _submit(world, array_tasks=(0, 1)).tasks
    every = _submit(world, dependency=f"afterok:{tasks[0].id}").job
    one = _submit(world, dependency=f"afterok:{tasks[0].id}_1").job
    assert every.dependency == f"afterok:{tasks[0].id}:{tasks[1].id}"
    assert one.dependency == f"afterok:{tasks[1].id}"
    with pytest.raises(store.InvalidRequest, match="no job"):
        _submit(world, dependency=f"afterok:{tasks[0].id}_7")
    mixed = _submit(world, dependency=f"afterok:{tasks[0].id}_0:{one.id},afterany:{every.id}")
    assert mixed.job.dependency == f"afterok:{tasks[0].id}:{one.id},afterany:{every.id}"


def test_array_tasks_get_slurms_variables_and_their_output_names(world: World) -> None:
    with world.sessions.begin() as s:
        done = store.submit(
            s,
            user_id=world.alice.id,
            name="sweep",
            command="python sweep.py",
            num_gpus=1,
            now=at(0),
            run=store_run(output_path="out_%A_%a.txt", environment={"LR": "0.1"}),
            eligibility=store.Eligibility(array_tasks=(4, 9)),
        )
    first, second = done.tasks
    array = first.id
    assert second.environment == {
        "LR": "0.1",
        **{
            f"{p}_{k}": v
            for p in ("SLURM", "JPUSHARE")
            for k, v in {
                "ARRAY_JOB_ID": str(array),
                "ARRAY_TASK_ID": "9",
                "ARRAY_TASK_COUNT": "2",
                "ARRAY_TASK_MIN": "4",
                "ARRAY_TASK_MAX": "9",
            }.items()
        },
    }
    assert first.environment is not None and first.environment["SLURM_ARRAY_TASK_ID"] == "4"
    assert (first.output_path, second.output_path) == (f"out_{array}_4.txt", f"out_{array}_9.txt")
    assert [t.waiting for t in done.tasks] == [None, None]
