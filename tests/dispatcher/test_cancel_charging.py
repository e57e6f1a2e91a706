"""SPEC §4 for cancelled jobs (both databases, the in-memory executor): every GPU-second a
run held is charged exactly once, including the time between the cancel and the moment the
run really stopped, which only the executor knows."""

from __future__ import annotations

import pytest

from jpushare import store
from tests.constants import TFLOPS
from tests.cycle_rig import MemoryRig, wait_for
from tests.job_script import Script
from tests.memory_executor import Program

# Keeps running 1 s after the cancel (a job saving a checkpoint).
SLOW_TO_STOP = Program(Script(seconds=None), stop_s=1.0)


@pytest.mark.parametrize("cancelled_when", ["DISPATCHED", "RUNNING"])
def test_a_cancelled_run_is_charged_until_it_really_ended_once(
    rig: MemoryRig, cancelled_when: str
) -> None:
    job_id = rig.submit("alice", 1, rig.executor.program(SLOW_TO_STOP))
    assert rig.cycle().dispatched.started == (job_id,)
    # The run has started; the database may not know it yet (DISPATCHED).
    wait_for(
        lambda: (
            (run := rig.executor.find(str(job_id), 1)) is not None and run.started_at is not None
        ),
        "the run starts",
    )
    if cancelled_when == "RUNNING":
        rig.cycle_until(rig.state_is(job_id, "RUNNING"), "the job is marked running")
    assert rig.job(job_id).state == cancelled_when
    with rig.sessions.begin() as s:
        store.cancel_job(s, job_id, store.utc_now())

    def run_ended() -> bool:
        run = rig.executor.find(str(job_id), 1)
        return run is not None and run.state.ended

    rig.cycle_until(run_ended, "the run stops")
    rig.cycle()  # observes the ended run
    run = rig.executor.find(str(job_id), 1)
    assert run is not None and run.started_at is not None and run.ended_at is not None
    seconds = run.ended_at - run.started_at
    assert seconds >= 0.9  # it ran on after the cancel
    job = rig.job(job_id)
    assert job.state == "CANCELLED" and job.tier_name is not None
    expected = 1 * seconds * TFLOPS[job.tier_name]
    assert rig.usage("alpha") == pytest.approx(expected, rel=1e-6)
    assert job.run_cost == pytest.approx(expected, rel=1e-6)
    assert job.started_at is not None and job.ended_at is not None
    assert store.to_epoch(job.ended_at) == pytest.approx(run.ended_at, abs=1e-3)

    # Exactly once: another cycle, or settling again, changes nothing.
    events = rig.kinds(job_id)
    rig.cycle()
    with rig.sessions.begin() as s:
        again = store.settle_cancelled_run(
            s,
            job_id,
            1,
            store.from_epoch(run.started_at),
            store.from_epoch(run.ended_at),
        )
    assert again == 0.0
    assert rig.kinds(job_id) == events
    assert rig.usage("alpha") == pytest.approx(expected, rel=1e-6)
    assert rig.job(job_id).run_cost == pytest.approx(expected, rel=1e-6)


def test_a_job_cancelled_in_the_queue_after_an_oom_requeue_is_not_settled_again(
    rig: MemoryRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, blocker = rig.start_held("bob", 2, "blocker")  # takes both rtx4090 GPUs
    oom = rig.submit(
        "alice",
        1,
        rig.script(
            Script(error="torch.OutOfMemoryError: CUDA out of memory.", seconds=0.3, exit_code=1)
        ),
    )
    rig.cycle_until(rig.state_is(oom, "GLOBAL_QUEUE_WAIT"), "the OOM attempt is requeued")
    with rig.sessions.begin() as s:
        store.cancel_job(s, oom, store.utc_now())
    calls: list[int] = []
    real_settle = store.settle_cancelled_run

    def settle(*args: object, **kwargs: object) -> float:
        calls.append(1)
        return real_settle(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "settle_cancelled_run", settle)
    rig.cycle()
    rig.cycle()
    assert calls == []  # its run was charged when it was requeued
    job = rig.job(oom)
    assert job.run_cost > 0
    assert rig.usage("alpha") == pytest.approx(job.charged_tflop_s)
    blocker.release()
