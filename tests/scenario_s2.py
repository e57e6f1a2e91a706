"""Scenarios S2 and S3 (SPEC §9) written once, for every executor: a 2-GPU job at the top
of the queue finds one of node-a's two rtx4090 GPUs busy, reserves the other and starts
nothing (S2); once the busy GPU is free the reservation absorbs it, fills, and the job
runs and is charged its run and its reservation (S3).

tests/dispatcher runs it on the in-memory and the local executor, tests/e2e_slurm on Slurm.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from jpushare.policy.model import ReleaseReason
from jpushare.store.observations import load_observed_busy
from tests.constants import TFLOPS
from tests.cycle_rig import CycleRig


def reserve_then_fill(rig: CycleRig, free_the_busy_gpu: Callable[[], None], command: str) -> int:
    """Run S2 and S3 for bob's 2-GPU job running `command`, on a rig where node-a (2 x
    rtx4090) is the only placement for it and one of its GPUs is busy until
    `free_the_busy_gpu()`. Returns the job's id."""
    big = rig.submit("bob", 2, command)

    # S2: the busy GPU is counted; the top job reserves the one idle GPU and waits.
    rig.cycle_until(lambda: rig.job(big).reserved_gpus == 1, "the 2-GPU job reserves")
    job = rig.job(big)
    assert (job.state, job.reserved_node_name, job.reserved_tier_name) == (
        "GLOBAL_QUEUE_WAIT",
        "node-a",
        "rtx4090",
    )
    with rig.sessions() as s:  # other nodes: whatever a shared cluster runs meanwhile
        assert load_observed_busy(s).get(("node-a", "rtx4090")) == 1
    for _ in range(3):
        rig.cycle()
    assert (rig.job(big).state, rig.job(big).reserved_gpus) == ("GLOBAL_QUEUE_WAIT", 1)
    assert rig.executor.find(str(big), 1) is None  # nothing submitted while it waits

    # S3: the GPU is free; the reservation absorbs it, fills and dispatches.
    free_the_busy_gpu()
    rig.cycle_until(rig.state_is(big, "RUNNING", "COMPLETED"), "the 2-GPU job starts")
    job = rig.job(big)
    assert (job.node_name, job.tier_name, job.reserved_gpus) == ("node-a", "rtx4090", 0)
    kinds = rig.kinds(big)
    assert kinds.index("reservation_started") < kinds.index("absorbed")
    assert kinds.index("absorbed") < kinds.index("released") < kinds.index("dispatched")
    assert rig.released(big) == [ReleaseReason.FILLED.value]

    # Charged once: its run (GPUs x seconds x TFLOPS) and its reservation (SPEC §4).
    rig.cycle_until(rig.state_is(big, "COMPLETED"), "the 2-GPU job completes")
    job = rig.job(big)
    run = rig.executor.find(str(big), 1)
    assert run is not None and run.started_at is not None and run.ended_at is not None
    seconds = run.ended_at - run.started_at
    assert job.run_cost == pytest.approx(2 * seconds * TFLOPS["rtx4090"], abs=1e-3)
    assert job.reservation_cost_tflop_s > 0
    lab = rig.users["bob"].lab_name
    assert rig.usage(lab) == pytest.approx(job.run_cost + job.reservation_cost_tflop_s)
    assert rig.kinds(big).count("charged") == 1
    return big
