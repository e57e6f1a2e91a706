"""LLM backfill on a real Slurm cluster: Slurm itself yields (executors/slurm_backfill.py).

The fake cluster's `backfill` partition (PriorityTier=1, PreemptMode=CANCEL, GraceTime=5)
under `gpu` (PriorityTier=10), preempt/partition_prio. Four one-GPU backfill jobs on
node-b's four 5090s; a two-GPU research job pinned to node-b: Slurm cancels exactly two of
them, the research job gets exactly their GPUs, and only once they have exited; the other
two keep running. The executor counts the backfill GPUs free (out of `used`), never lists
a backfill job as a run.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpushare.executors.base import LaunchSpec, RunState
from jpushare.executors.slurm import SlurmExecutor
from jpushare.executors.slurm_backfill import BackfillSlot, SlurmBackfill, parse_backfill_name
from tests.executors.contract import wait_for
from tests.executors.live_slurm import cluster_guard, session_prefix, shared_dir, slurm

pytestmark = pytest.mark.slurm

PREFIX = session_prefix()
WAIT_S = 60.0


@pytest.fixture(scope="module", autouse=True)
def _cluster() -> Iterator[None]:
    yield from cluster_guard(PREFIX)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_dir(tmp_path_factory, "slurm-backfill")


@pytest.fixture(scope="module")
def executor(logs: Path) -> SlurmExecutor:
    ex = SlurmExecutor(logs, name_prefix=PREFIX)
    if ex.backfill is None or not _partition_exists("backfill"):
        pytest.fail(
            "the fake cluster has no backfill partition: restart it with this "
            "scripts/slurm/start-fake-cluster.sh (scripts/ensure-services.sh does)"
        )
    return ex


def _partition_exists(name: str) -> bool:
    return name in slurm("sinfo", "-h", "-o", "%R").stdout.split()


def _server(out: Path) -> str:
    """A stand-in server: writes its GPUs, then on SIGTERM takes a second before it exits
    (the grace at work) and writes when it exits, the moment its GPUs are free."""
    return f"trap 'sleep 1; date +%s.%N > {out}.exit; exit 0' TERM; while :; do sleep 0.1; done"


def _written(path: Path) -> str:
    """What a job wrote to `path`, once it has (jobs write it as they start)."""

    def probe() -> str | None:
        return path.read_text().strip() or None if path.is_file() else None

    return wait_for(probe, WAIT_S, 0.1, f"{path.name} written")


def _node_b_free(ex: SlurmExecutor) -> bool:
    """node-b's 5090s neither in use nor held by backfill (another test may hold one)."""
    (g,) = [g for g in ex.inventory() if (g.node, g.gpu_type) == ("node-b", "rtx5090")]
    return g.used == 0 and g.backfill == 0


def _states(bf: SlurmBackfill, ids: list[str]) -> dict[str, str]:
    jobs = {sid: job for sid, (_, job) in bf.keeper_jobs().items()}
    return {sid: jobs[sid].state for sid in ids if sid in jobs}


def test_a_backfill_job_name_is_never_a_run_name() -> None:
    slot = BackfillSlot("node-b", "rtx5090", 3)
    from jpushare.executors.slurm_backfill import backfill_name
    from jpushare.executors.slurm_parse import parse_run_name

    name = backfill_name("jps", slot)
    assert parse_backfill_name(name, "jps") == slot
    assert parse_run_name(name, "jps") is None
    assert parse_backfill_name("jps-12-1", "jps") is None
    assert parse_backfill_name(name, "other") is None


def test_a_research_job_preempts_exactly_the_backfill_gpus_it_needs(
    executor: SlurmExecutor, logs: Path
) -> None:
    bf = executor.backfill
    assert bf is not None
    wait_for(lambda: _node_b_free(executor), 120.0, 1.0, "node-b's 5090s free")

    ids: list[str] = []
    for i in range(4):
        ids.append(
            bf.submit(BackfillSlot("node-b", "rtx5090", i), 1, _server(logs / f"llm{i}"), {})
        )
    wait_for(lambda: set(_states(bf, ids).values()) == {"RUNNING"}, WAIT_S, 0.2, "4 running")
    gpus = {
        sid: _written(bf.gpus_file(BackfillSlot("node-b", "rtx5090", i)))
        for i, sid in enumerate(ids)
    }
    assert sorted(gpus.values()) == ["0", "1", "2", "3"]  # one GPU each, all of node-b's

    # Free for research, not foreign, not a run.
    (g,) = [g for g in executor.inventory() if (g.node, g.gpu_type) == ("node-b", "rtx5090")]
    assert (g.used, g.backfill) == (0, 4)
    assert "backfill" not in g.partitions
    assert not any(r.executor_id in ids for r in executor.runs())

    job_id = f"t{uuid.uuid4().hex[:10]}"
    research_out = logs / "research"
    spec = LaunchSpec(
        job_id=job_id,
        attempt=1,
        name="research",
        command=f'date +%s.%N > {research_out}.start; echo "$SLURM_JOB_GPUS" > '
        f"{research_out}.gpus; sleep 300",
        node="node-b",
        gpu_type="rtx5090",
        num_gpus=2,
        partition="gpu",
    )
    executor.submit(spec)

    def started() -> bool:
        info = executor.find(job_id, 1)
        return info is not None and info.state is RunState.RUNNING

    wait_for(started, WAIT_S, 0.2, "research job running")
    research_gpus = set(_written(research_out.with_suffix(".gpus")).split(","))
    started_at = float(_written(research_out.with_suffix(".start")))

    states = _states(bf, ids)
    preempted = [sid for sid in ids if states.get(sid) == "PREEMPTED"]
    running = [sid for sid in ids if states.get(sid) == "RUNNING"]
    assert (len(preempted), len(running)) == (2, 2), states
    # Exactly the preempted jobs' GPUs, none of a job still running.
    assert research_gpus == {gpus[sid] for sid in preempted}
    assert research_gpus.isdisjoint(gpus[sid] for sid in running)
    # Started only once each preempted server had exited (Slurm waited out their SIGTERM).
    for sid in preempted:
        i = ids.index(sid)
        exited = float((logs / f"llm{i}.exit").read_text())
        assert started_at >= exited
    for sid in running:
        assert not (logs / f"llm{ids.index(sid)}.exit").exists()

    (g,) = [g for g in executor.inventory() if (g.node, g.gpu_type) == ("node-b", "rtx5090")]
    assert (g.used, g.backfill) == (2, 2)  # the research job's 2; backfill's 2 stay free
    executor.cancel(executor.find(job_id, 1).executor_id)  # type: ignore[union-attr]
    for sid in running:
        bf.cancel(sid)
