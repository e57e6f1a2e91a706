"""SPEC §9 scenarios end to end on the real Slurm cluster: the real dispatcher cycle, the real
SlurmExecutor (sinfo / sbatch / squeue / scancel) and the store, with short jobs.

S2/S3 (beside a foreign Slurm job, on SQLite and PostgreSQL: tests/scenario_s2.py, which
tests/dispatcher runs on the other executors), S4 swap, S10 OOM
escalation, S11 cancel during a reservation, S12 a node set down with `scontrol`, and a
run squeue has forgotten (as after `MinJobAge`) that must not run twice. Each test opens
only the nodes it needs (conftest.py); placements are tried strongest tier first.
"""

from __future__ import annotations

import pytest

from jpushare import store
from jpushare.dispatcher.cycle import CycleDeps, run_cycle
from jpushare.executors.slurm import SlurmExecutor
from jpushare.policy.model import ReleaseReason
from jpushare.store.schema import EventKind
from tests.e2e_slurm.conftest import TFLOPS, SlurmRig, slurm_state
from tests.executors.live_slurm import require_root, slurm
from tests.scenario_s2 import reserve_then_fill

pytestmark = pytest.mark.slurm

CUDA_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def slurm_field(name: str, fmt: str) -> str:
    """One squeue field (`%P` partition, `%b` GRES) of the Slurm job with this name."""
    return slurm("squeue", "-h", "-t", "all", f"--name={name}", "-o", fmt).stdout.strip()


def run_seconds(rig: SlurmRig, job_id: int, attempt: int = 1) -> float:
    """How long Slurm says the run ran (its start and end times, whole seconds)."""
    run = rig.executor.find(str(job_id), attempt)
    assert run is not None and run.started_at is not None and run.ended_at is not None
    return run.ended_at - run.started_at


def test_s2_s3_a_two_gpu_job_reserves_beside_a_foreign_job_then_fills_and_starts(
    rig: SlurmRig,
) -> None:
    rig.open_only("node-a")  # 2 x rtx4090
    flag = rig.flag("foreign")
    rig.foreign_job("node-a", "rtx4090:1", flag)  # sbatch'd outside JPU-Share

    big = reserve_then_fill(rig, flag.touch, "sleep 2")

    name = rig.run_name(big)
    assert rig.run_names() == [name]  # sbatch'd once, only once it filled
    assert slurm_field(name, "%P|%b") == "gpu|gres:gpu:rtx4090:2"


def test_s4_a_reserving_job_swaps_to_a_placement_that_frees_two_gpus_at_once(
    sqlite_rig: SlurmRig,
) -> None:
    rig = sqlite_rig
    rig.open_only("node-a", "node-d")  # 2 x rtx4090, 2 x rtx3080ti (partition legacy)
    one, free_a = rig.start_held("alice", 1, "a")  # strongest first: node-a
    two, free_d = rig.start_held("alice", 2, "d")  # only node-d has 2 idle
    assert (rig.job(one).node_name, rig.job(two).node_name) == ("node-a", "node-d")
    assert slurm_field(rig.run_name(two), "%P") == "legacy"  # the tier's partition

    big = rig.submit("bob", 2, "sleep 1")
    rig.cycle_until(lambda: rig.job(big).reserved_gpus == 1, "the 2-GPU job reserves")
    assert rig.job(big).reserved_node_name == "node-a"

    # node-d frees 2 GPUs at once: the job starts there and lets node-a's GPU go.
    free_d.release()
    rig.cycle_until(rig.state_is(big, "RUNNING", "COMPLETED"), "the 2-GPU job starts")
    job = rig.job(big)
    assert (job.node_name, job.tier_name, job.reserved_gpus) == ("node-d", "rtx3080ti", 0)
    assert rig.released(big) == [ReleaseReason.SWAP.value]
    # The released GPU serves the next job at once.
    small = rig.submit("carol", 1, "sleep 1")
    rig.cycle_until(rig.state_is(small, "RUNNING", "COMPLETED"), "a 1-GPU job starts")
    assert rig.job(small).node_name == "node-a"

    free_a.release()
    for job_id in (one, two, big, small):
        rig.cycle_until(rig.state_is(job_id, "COMPLETED"), f"job {job_id} completes")
    assert rig.run_names() == sorted(rig.run_name(j) for j in (one, two, big, small))
    job = rig.job(big)
    assert rig.usage("KDG") == pytest.approx(job.run_cost + job.reservation_cost_tflop_s)


def test_s11_cancel_during_a_reservation_releases_it_and_charges_the_reservation(
    sqlite_rig: SlurmRig,
) -> None:
    rig = sqlite_rig
    rig.open_only("node-a")
    rig.start_held("alice", 1, "blocker")  # a JPU-Share job this time
    big = rig.submit("bob", 2, "sleep 1")
    rig.cycle_until(lambda: rig.job(big).reserved_gpus == 1, "the 2-GPU job reserves")
    rig.cycle_until(lambda: rig.job(big).reservation_cost_tflop_s > 0, "the reservation accrues")

    with rig.sessions.begin() as s:  # what the API's cancel does
        cancelled = store.cancel_job(s, big, store.utc_now())
    assert cancelled.released is ReleaseReason.CANCEL
    assert cancelled.stop_attempt is None  # never sbatch'd: nothing to stop
    rig.cycle()
    job = rig.job(big)
    assert (job.state, job.reserved_gpus, job.run_cost) == ("CANCELLED", 0, 0.0)
    assert rig.released(big) == [ReleaseReason.CANCEL.value]
    events = {e.kind: e for e in rig.history(big)}
    held_s = (
        events[EventKind.RELEASED].at - events[EventKind.RESERVATION_STARTED].at
    ).total_seconds()
    expected = 1 * held_s * TFLOPS["rtx4090"]  # event times: within a millisecond
    assert job.reservation_cost_tflop_s == pytest.approx(expected, abs=1e-3 * TFLOPS["rtx4090"])
    assert rig.usage("KDG") == pytest.approx(job.reservation_cost_tflop_s)
    assert cancelled.charged_tflop_s == pytest.approx(job.reservation_cost_tflop_s)

    # The reserved GPU is free again.
    small = rig.submit("carol", 1, "sleep 1")
    rig.cycle_until(rig.state_is(small, "RUNNING", "COMPLETED"), "a 1-GPU job takes it")
    assert rig.job(small).node_name == "node-a"
    assert rig.run_name(big) not in rig.run_names()


def test_s12_a_node_set_down_in_slurm_releases_the_reservation_and_the_job_stays_queued(
    sqlite_rig: SlurmRig,
) -> None:
    require_root()
    rig = sqlite_rig
    rig.open_only("node-a")
    rig.foreign_job("node-a", "rtx4090:1", rig.flag("foreign"))
    big = rig.submit("bob", 2, "sleep 1")
    rig.cycle_until(lambda: rig.job(big).reserved_gpus == 1, "the 2-GPU job reserves")

    slurm("scontrol", "update", "nodename=node-a", "state=down", "reason=jpushare-e2e-S12")
    try:
        rig.cycle_until(lambda: rig.job(big).reserved_gpus == 0, "R5 releases the reservation")
        job = rig.job(big)
        assert (job.state, job.reserved_node_name) == ("GLOBAL_QUEUE_WAIT", None)
        assert rig.released(big) == [ReleaseReason.R5.value]
        with rig.sessions() as s:
            node = {n.name: n for n in store.list_nodes(s)}["node-a"]
        assert (node.state, node.schedulable) == ("down", False)
        for _ in range(3):  # no new reservation on a down node, no dispatch
            rig.cycle()
        assert (rig.job(big).state, rig.job(big).reserved_gpus) == ("GLOBAL_QUEUE_WAIT", 0)
        assert rig.run_names() == []
    finally:
        slurm("scontrol", "update", "nodename=node-a", "state=resume")

    # Back in service (the foreign job died with the node: --no-requeue): the job runs.
    rig.cycle_until(rig.state_is(big, "COMPLETED"), "the 2-GPU job runs once node-a is back")
    job = rig.job(big)
    assert (job.node_name, job.attempts) == ("node-a", 1)
    assert rig.run_names() == [rig.run_name(big)]
    assert rig.usage("KDG") == pytest.approx(job.run_cost + job.reservation_cost_tflop_s)


def test_s10_a_cuda_oom_on_the_weaker_tier_is_retried_on_a_stronger_one(
    sqlite_rig: SlurmRig,
) -> None:
    rig = sqlite_rig
    rig.open_only("node-a", "node-d")
    flag = rig.flag("foreign")
    rig.foreign_job("node-a", "rtx4090:2", flag)  # the stronger tier is full
    oom = rig.submit(
        "alice",
        1,
        'if [ "$JPUSHARE_ATTEMPT" = 1 ]; then sleep 1; '
        f"echo '{CUDA_OOM}' >&2; exit 1; fi; echo \"fits on $JPUSHARE_NODE\"; sleep 1",
    )
    rig.cycle_until(
        lambda: rig.job(oom).state == "GLOBAL_QUEUE_WAIT" and "oom_requeued" in rig.kinds(oom),
        "the OOM attempt is requeued",
    )
    job = rig.job(oom)
    first = rig.executor.find(str(oom), 1)
    assert first is not None and first.node == "node-d"
    assert slurm_field(rig.run_name(oom, 1), "%P|%b") == "legacy|gres:gpu:rtx3080ti:1"
    assert job.attempts == 1
    assert job.minimum_tier_sort_order == 20  # rtx3080ti (10) -> rtx4090 (20)
    assert "CUDA out of memory" in (job.reason or "")
    attempt_1 = 1 * run_seconds(rig, oom, 1) * TFLOPS["rtx3080ti"]
    assert job.run_cost == pytest.approx(attempt_1) and job.run_cost > 0
    assert rig.usage("BCG") == pytest.approx(job.run_cost)  # charged for that attempt

    # node-d is free now, but too weak: the job waits for node-a.
    for _ in range(3):
        rig.cycle()
    assert rig.job(oom).state == "GLOBAL_QUEUE_WAIT"
    flag.touch()
    rig.cycle_until(rig.state_is(oom, "COMPLETED"), "the second attempt completes")
    job = rig.job(oom)
    assert (job.attempts, job.node_name, job.tier_name) == (2, "node-a", "rtx4090")
    assert rig.executor.log(str(oom), 2) == "fits on node-a\n"
    assert rig.run_names() == [rig.run_name(oom, 1), rig.run_name(oom, 2)]
    attempt_2 = 1 * run_seconds(rig, oom, 2) * TFLOPS["rtx4090"]
    assert job.run_cost == pytest.approx(attempt_1 + attempt_2)
    assert rig.usage("BCG") == pytest.approx(job.run_cost)


def test_a_run_slurm_has_forgotten_fails_as_unknown_and_never_runs_twice(
    sqlite_rig: SlurmRig,
) -> None:
    rig = sqlite_rig
    rig.open_only("node-a")
    job_id, _ = rig.start_held("alice", 1, "long")
    executor_id = rig.job(job_id).executor_id
    name = rig.run_name(job_id)

    # A dispatcher whose squeue does not list the run (as after MinJobAge): another name
    # prefix. The fake cluster has no accounting: sacct cannot tell what became of it.
    blind = SlurmExecutor(rig.shared / "logs", name_prefix=f"{rig.prefix}x")
    report = run_cycle(CycleDeps(rig.sessions, blind))
    assert report.observed is not None and report.observed.requeued == 0
    job = rig.job(job_id)
    assert (job.state, job.attempts) == ("FAILED", 1)
    assert f"Slurm no longer knows job {executor_id}" in (job.reason or "")
    assert "outcome is unknown" in (job.reason or "")
    assert "node_fail_requeued" not in rig.kinds(job_id)
    assert rig.usage("BCG") == pytest.approx(job.run_cost)
    for _ in range(2):
        run_cycle(CycleDeps(rig.sessions, blind))
    assert rig.run_names() == [name]  # not submitted again

    # The real dispatcher sees the run alive for a failed job: it stops it.
    rig.cycle_until(lambda: slurm_state(name) == ["CANCELLED"], "the orphaned run is stopped")
    assert rig.job(job_id).state == "FAILED"
