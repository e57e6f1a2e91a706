"""SlurmExecutor against a real Slurm cluster (scripts/slurm/start-fake-cluster.sh).

What the contract suite (test_slurm_contract.py) does not cover: the inventory of the
fake layout, foreign jobs, node down/drain/resume, NODE_FAIL, host OOM, TIMEOUT, sbatch
refusals, a restarted executor. Each test cancels its jobs and resumes what it took down.
The TIMEOUT job is submitted first and checked last, so its minute overlaps the others.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpushare.executors.base import LaunchSpec, NodeState, RunInfo, RunState, SubmitRefused
from jpushare.executors.slurm import SlurmExecutor
from tests.executors.contract import wait_for
from tests.executors.live_slurm import (
    LAYOUT,
    PARTITIONS,
    cluster_guard,
    require_root,
    session_prefix,
    shared_dir,
    slurm,
)

pytestmark = pytest.mark.slurm

PREFIX = session_prefix()
WAIT_S = 30.0


@pytest.fixture(scope="module", autouse=True)
def _cluster() -> Iterator[None]:
    yield from cluster_guard(PREFIX)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_dir(tmp_path_factory, "slurm-logs")


@pytest.fixture(scope="module")
def executor(logs: Path) -> SlurmExecutor:
    return SlurmExecutor(logs, name_prefix=PREFIX)


def spec(
    node: str,
    gpu_type: str,
    command: str,
    num_gpus: int = 1,
    partition: str | None = "gpu",
    time_limit_s: float | None = None,
) -> LaunchSpec:
    job_id = f"t{uuid.uuid4().hex[:10]}"
    return LaunchSpec(
        job_id=job_id,
        attempt=1,
        name=f"live {job_id}",
        command=command,
        node=node,
        gpu_type=gpu_type,
        num_gpus=num_gpus,
        partition=partition,
        time_limit_s=time_limit_s,
    )


def wait_state(
    ex: SlurmExecutor, s: LaunchSpec, *states: RunState, timeout_s: float = WAIT_S
) -> RunInfo:
    def probe() -> RunInfo | None:
        info = ex.find(s.job_id, s.attempt)
        return info if info is not None and info.state in states else None

    return wait_for(probe, timeout_s, 0.2, f"{s.job_id} in {states}")


def used(ex: SlurmExecutor, node: str, gpu_type: str) -> int:
    return sum(g.used for g in ex.inventory() if (g.node, g.gpu_type) == (node, gpu_type))


def node_state(ex: SlurmExecutor, node: str) -> NodeState:
    states = {g.state for g in ex.inventory() if g.node == node}
    assert len(states) == 1, states
    return states.pop()


@pytest.fixture(scope="module")
def timeout_run(executor: SlurmExecutor) -> LaunchSpec:
    """A job with a 1-minute limit (time_limit_s rounds up to whole minutes), started first.

    JPUSHARE_SLURM_SKIP_TIMEOUT=1 skips the two tests that use it (saves about a minute).
    """
    if os.environ.get("JPUSHARE_SLURM_SKIP_TIMEOUT") == "1":
        pytest.skip("JPUSHARE_SLURM_SKIP_TIMEOUT=1")
    s = spec("node-b", "rtx5090", "sleep 600", time_limit_s=20)
    executor.submit(s)
    return s


def test_a_time_limited_job_is_started_first(
    timeout_run: LaunchSpec, executor: SlurmExecutor
) -> None:
    assert wait_state(executor, timeout_run, RunState.RUNNING).node == "node-b"


def test_the_inventory_is_the_fake_layout(executor: SlurmExecutor) -> None:
    groups = executor.inventory()

    assert {(g.node, g.gpu_type): g.total for g in groups} == LAYOUT
    assert {g.node: g.partitions for g in groups} == PARTITIONS
    assert all(g.state is NodeState.UP for g in groups)
    assert all(0 <= g.used <= g.total for g in groups)


def test_a_pinned_two_gpu_job_gets_two_devices_on_its_node(executor: SlurmExecutor) -> None:
    s = spec(
        "node-a", "rtx4090", 'echo "CVD=$CUDA_VISIBLE_DEVICES NODE=$SLURMD_NODENAME"', num_gpus=2
    )
    submitted_at = time.time()
    executor.submit(s)

    info = wait_state(executor, s, RunState.COMPLETED)

    line = next(x for x in executor.log(s.job_id, 1).splitlines() if x.startswith("CVD="))
    cvd, node = (part.split("=", 1)[1] for part in line.split())
    assert len(cvd.split(",")) == 2 and node == "node-a"
    assert info.node == "node-a"
    # Slurm's local-time StartTime converted to UNIX seconds: within seconds of our clock
    # (Slurm prints whole seconds, hence the 1 s slack before).
    assert info.started_at is not None and info.ended_at is not None
    assert submitted_at - 1 <= info.started_at <= info.ended_at <= time.time() + 1


def test_used_gpus_follow_our_job_and_a_foreign_one(executor: SlurmExecutor, logs: Path) -> None:
    before = (used(executor, "node-c", "rtx4090"), used(executor, "node-c", "rtx5090"))
    ours = spec("node-c", "rtx4090", "sleep 60", num_gpus=2)
    ours_id = executor.submit(ours)
    foreign = slurm(
        "sbatch",
        "--parsable",
        f"--job-name={PREFIX}foreign",
        "--partition=gpu",
        "--nodelist=node-c",
        "--gres=gpu:rtx5090:3",
        f"--output={logs}/foreign.out",
        "--wrap=sleep 60",
    ).stdout.strip()
    try:
        wait_state(executor, ours, RunState.RUNNING)
        wait_for(
            lambda: (
                (used(executor, "node-c", "rtx4090"), used(executor, "node-c", "rtx5090"))
                == (before[0] + 2, before[1] + 3)
            ),
            WAIT_S,
            0.2,
            "node-c: 2 rtx4090 and 3 rtx5090 more in use",
        )
        assert foreign not in {r.executor_id for r in executor.runs()}  # not ours
        assert ours_id in {r.executor_id for r in executor.runs()}
    finally:
        executor.cancel(ours_id)
        slurm("scancel", foreign, check=False)
    wait_for(
        lambda: (
            (used(executor, "node-c", "rtx4090"), used(executor, "node-c", "rtx5090")) == before
        ),
        WAIT_S,
        0.2,
        "node-c GPUs back",
    )


def test_a_gres_type_slurm_does_not_know_is_refused_and_leaves_nothing(
    executor: SlurmExecutor,
) -> None:
    s = spec("node-a", "no-such-gpu", "true")

    with pytest.raises(SubmitRefused, match="Requested node configuration is not available"):
        executor.submit(s)

    # sbatch gave it an id and a FAILED/BadConstraints record: the executor does not see it
    assert executor.find(s.job_id, 1) is None
    assert s.job_id not in {r.job_id for r in executor.runs()}


def test_a_partition_without_the_node_is_refused(executor: SlurmExecutor) -> None:
    with pytest.raises(SubmitRefused, match="node configuration is not available"):
        executor.submit(spec("node-a", "rtx4090", "true", partition="legacy"))


def test_a_restarted_executor_finds_the_run_and_does_not_submit_it_again(
    executor: SlurmExecutor, logs: Path
) -> None:
    s = spec("node-b", "rtx5090", "sleep 30")
    first = executor.submit(s)
    restarted = SlurmExecutor(logs, name_prefix=PREFIX)
    try:
        assert restarted.submit(s) == first
        found = restarted.find(s.job_id, 1)
        assert found is not None and found.executor_id == first
        assert [r.executor_id for r in restarted.runs() if r.job_id == s.job_id] == [first]
    finally:
        restarted.cancel(first)
    assert wait_state(executor, s, RunState.CANCELLED).exit_code is not None


def test_a_job_over_its_memory_limit_is_oom(logs: Path) -> None:
    # With cgroups Slurm says OUT_OF_MEMORY; without (containers) FAILED plus a line in
    # the output: both are OOM to the dispatcher (SPEC §5).
    ex = SlurmExecutor(logs, name_prefix=PREFIX, sbatch_args=("--mem=100M",))
    s = spec(
        "node-b", "rtx5090", """python3 -c 'import time; a = b"x" * (600 << 20); time.sleep(30)'"""
    )
    ex.submit(s)

    info = wait_state(ex, s, RunState.OOM, RunState.FAILED, RunState.COMPLETED)

    assert info.state is RunState.OOM, info
    reason = info.reason or ""
    assert "OUT_OF_MEMORY" in reason or "out of memory" in reason, reason


def test_a_node_set_down_is_down_fails_its_job_and_comes_back_up(executor: SlurmExecutor) -> None:
    require_root()
    s = spec("node-d", "rtx3080ti", "sleep 120", partition="legacy")
    executor.submit(s)
    wait_state(executor, s, RunState.RUNNING)
    try:
        slurm("scontrol", "update", "nodename=node-d", "state=down", "reason=jpushare test")
        wait_for(lambda: node_state(executor, "node-d") is NodeState.DOWN, WAIT_S, 0.2, "DOWN")

        # --no-requeue: NODE_FAIL, for the dispatcher to requeue (SPEC §5)
        info = wait_state(executor, s, RunState.NODE_FAIL)
        assert info.node == "node-d" and info.ended_at is not None
    finally:
        slurm("scontrol", "update", "nodename=node-d", "state=resume")
    wait_for(lambda: node_state(executor, "node-d") is NodeState.UP, WAIT_S, 0.2, "UP again")


def test_a_draining_then_drained_node_is_not_schedulable(executor: SlurmExecutor) -> None:
    require_root()
    s = spec("node-d", "rtx3080ti", "sleep 120", partition="legacy")
    run_id = executor.submit(s)
    wait_state(executor, s, RunState.RUNNING)
    try:
        slurm("scontrol", "update", "nodename=node-d", "state=drain", "reason=jpushare test")
        wait_for(lambda: node_state(executor, "node-d") is NodeState.DRAIN, WAIT_S, 0.2, "draining")
        assert (
            wait_state(executor, s, RunState.RUNNING).state is RunState.RUNNING
        )  # drain kills nothing
        executor.cancel(run_id)
        wait_state(executor, s, RunState.CANCELLED)
        assert node_state(executor, "node-d") is NodeState.DRAIN  # drained, still not schedulable
    finally:
        slurm("scontrol", "update", "nodename=node-d", "state=resume")
    wait_for(lambda: node_state(executor, "node-d") is NodeState.UP, WAIT_S, 0.2, "UP again")


def test_a_job_past_its_time_limit_is_timeout(
    timeout_run: LaunchSpec, executor: SlurmExecutor
) -> None:
    # Slurm ends it up to ~30 s after the minute; submitted at module start.
    info = wait_state(executor, timeout_run, RunState.TIMEOUT, RunState.CANCELLED, timeout_s=120)

    assert info.state is RunState.TIMEOUT, info
    assert info.started_at is not None and info.ended_at is not None
    assert 55 <= info.ended_at - info.started_at <= 100
