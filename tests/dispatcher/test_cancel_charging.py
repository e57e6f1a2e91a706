"""SPEC §4 for cancelled jobs (both databases, the real local executor): every GPU-second a
run held is charged exactly once, including the time between the cancel and the moment the
run really stopped, which only the executor knows."""

from __future__ import annotations

import pytest

from jpushare import store
from tests.dispatcher.conftest import Rig, wait_for

TFLOPS = {"rtx4090": 82.6, "rtx3080ti": 34.1}

# Keeps running ~1 s after the SIGTERM of the cancel (a job saving a checkpoint).
SLOW_TO_STOP = "trap 'sleep 1; exit 0' TERM; sleep 300 & wait"


def lab_usage(rig: Rig, lab: str) -> float:
    with rig.sessions() as s:
        return store.get_lab(s, lab).cumulative_usage


@pytest.mark.parametrize("cancelled_when", ["DISPATCHED", "RUNNING"])
def test_a_cancelled_run_is_charged_until_it_really_ended_once(
    rig: Rig, cancelled_when: str
) -> None:
    job_id = rig.submit("alice", 1, SLOW_TO_STOP)
    assert rig.cycle().dispatched.started == (job_id,)
    # The process has started; the database may not know it yet (DISPATCHED).
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
    assert lab_usage(rig, "alpha") == pytest.approx(expected, rel=1e-6)
    assert job.run_cost == pytest.approx(expected, rel=1e-6)
    assert job.started_at is not None and job.ended_at is not None
    assert store.to_epoch(job.ended_at) == pytest.approx(run.ended_at, abs=1e-3)

    # Exactly once: another cycle, or settling again, changes nothing.
    events = rig.events(job_id)
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
    assert rig.events(job_id) == events
    assert lab_usage(rig, "alpha") == pytest.approx(expected, rel=1e-6)
    assert rig.job(job_id).run_cost == pytest.approx(expected, rel=1e-6)
