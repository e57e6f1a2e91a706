"""A service restart in the middle loses and doubles nothing, on the real Slurm cluster.

Real `jpushare serve --no-api` processes (`python -m jpushare.service`) with
JPUSHARE_EXECUTOR=slurm and the JPUSHARE_SLURM_* settings, on PostgreSQL, killed with
SIGKILL twice: once between an sbatch and its record (the crash hook `after_submit`), once
while the jobs run, one of which then ends while no dispatcher is up. Each attempt must be
exactly one Slurm job (counted by name in `squeue -t all`) and each lab charged once.

The tier names differ from the GRES types here (tier `ada4090` = GRES `rtx4090`, through
JPUSHARE_SLURM_GPU_TYPES), so the mapping is proven through the service: inventory sync,
busy GPUs and sbatch's `--gres` all speak of the same GPUs.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dispatcher.processes import start_service
from tests.e2e_slurm.conftest import SlurmRig, make_rig, slurm_state, wait_for, waits_for
from tests.executors.live_slurm import slurm

pytestmark = [pytest.mark.slurm, pytest.mark.postgres]

MAPPED_CLUSTER = """
tiers:
  - {name: rtx3080ti, tflops: 34.1,  sort_order: 10, partition: legacy}
  - {name: ada4090,   tflops: 82.6,  sort_order: 20, partition: gpu}
  - {name: rtx5090,   tflops: 104.8, sort_order: 30, partition: gpu}
nodes:
  - {name: node-a, gpus: {ada4090: 2}}
  - {name: node-b, gpus: {rtx5090: 4}}
  - {name: node-c, gpus: {ada4090: 4, rtx5090: 4}}
  - {name: node-d, gpus: {rtx3080ti: 2}}
labs: {BCG: 0, KDG: 0, NLP: 0}
"""
GPU_TYPES = "rtx4090=ada4090"


@pytest.fixture
def pg_rig(tmp_path: Path, shared: Path) -> Iterator[SlurmRig]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(MAPPED_CLUSTER)
    yield from make_rig(
        "postgresql", tmp_path, shared, cluster=cluster, gpu_type_to_tier={"rtx4090": "ada4090"}
    )


def serve_env(rig: SlurmRig, tmp_path: Path, **extra: str) -> dict[str, str]:
    settings = {"JPUSHARE_SLURM_GPU_TYPES": GPU_TYPES, "JPUSHARE_CYCLE_S": "0.2"} | extra
    return rig.service_env(tmp_path, **settings)


def test_a_service_killed_twice_loses_and_doubles_nothing(pg_rig: SlurmRig, tmp_path: Path) -> None:
    rig = pg_rig
    rig.open_only("node-a")  # 2 GPUs: both jobs are dispatched in the first cycle
    jobs = [rig.submit(user, 1, waits_for(rig.flag(user))) for user in ("alice", "bob")]
    flags = dict(zip(jobs, (rig.flag("alice"), rig.flag("bob")), strict=True))
    names = {j: rig.run_name(j) for j in jobs}

    # 1. Killed right after its first sbatch, before recording it.
    first = start_service(
        "serve-1", serve_env(rig, tmp_path, JPUSHARE_CRASH_AT="after_submit"), tmp_path, "--no-api"
    )
    code = first.wait_exit("the service kills itself after its first sbatch")
    assert code == -signal.SIGKILL, first.log()
    for j in jobs:
        job = rig.job(j)
        assert (job.state, job.executor_id) == ("DISPATCHED", None)
    submitted = rig.run_names()
    assert len(submitted) == 1 and submitted[0] in names.values(), submitted

    # 2. Restarted: it confirms the run it finds and submits the other; then killed again.
    second = start_service("serve-2", serve_env(rig, tmp_path), tmp_path, "--no-api")
    try:
        wait_for(lambda: all(rig.job(j).state == "RUNNING" for j in jobs), "both jobs run")
    finally:
        second.kill()
    assert rig.run_names() == sorted(names.values()), second.log()
    for j in jobs:
        job = rig.job(j)
        assert (job.node_name, job.tier_name) == ("node-a", "ada4090")
        out = slurm("squeue", "-h", "-t", "all", f"--name={names[j]}", "-o", "%i|%P|%b")
        assert out.stdout.strip() == f"{job.executor_id}|gpu|gres:gpu:rtx4090:1"

    # 3. One job ends while no dispatcher runs; the next service finds it ended. It runs
    # two seconds first: Slurm's times are whole seconds, and a run that starts and ends
    # in one second costs 0 and is charged nothing.
    ended, other = jobs
    started = rig.job(ended).started_at
    assert started is not None
    wait_for(lambda: time.time() >= started.timestamp() + 2, "the job has run two seconds")
    flags[ended].touch()
    wait_for(lambda: slurm_state(names[ended]) == ["COMPLETED"], "the job ends in Slurm")
    assert rig.job(ended).state == "RUNNING"
    third = start_service("serve-3", serve_env(rig, tmp_path), tmp_path, "--no-api")
    try:
        wait_for(rig.state_is(ended, "COMPLETED"), "the restarted service records the end")
        flags[other].touch()
        wait_for(rig.state_is(other, "COMPLETED"), "the other job completes")
    finally:
        code = third.stop()
    assert code == 0, third.log()

    # Nothing lost, nothing doubled, each lab charged once.
    assert rig.run_names() == sorted(names.values())
    for j, lab in zip(jobs, ("BCG", "KDG"), strict=True):
        job = rig.job(j)
        kinds = rig.kinds(j)
        assert (job.state, job.attempts, job.exit_code) == ("COMPLETED", 1, 0)
        assert kinds.count("dispatched") == 1
        assert kinds.count("charged") == 1
        run = rig.executor.find(str(j), 1)
        assert run is not None and run.started_at is not None and run.ended_at is not None
        assert job.run_cost == pytest.approx((run.ended_at - run.started_at) * 82.6)
        assert rig.usage(lab) == pytest.approx(job.run_cost)
    assert rig.usage("NLP") == 0.0


def test_serve_refuses_to_start_where_another_database_ran_jobs_under_its_prefix(
    sqlite_rig: SlurmRig, tmp_path: Path
) -> None:
    # A database wiped and created again: Slurm still shows the old one's job 1 (MinJobAge),
    # which the new database's job 1 would otherwise adopt without ever running.
    rig = sqlite_rig
    old = rig.run_name(1)
    gres = "--gres=gpu:rtx4090:1"
    slurm(
        "sbatch",
        f"--job-name={old}",
        "--nodelist=node-a",
        gres,
        "-o",
        "/dev/null",
        "--wrap",
        "true",
    )
    wait_for(lambda: slurm_state(old) == ["COMPLETED"], "the old database's run ends")
    env = serve_env(rig, tmp_path, JPUSHARE_SLURM_GPU_TYPES="")
    service = start_service("serve-stranger", env, tmp_path, "--no-api")
    assert service.wait_exit("serve refuses to start") == 2, service.log()
    assert f"e.g. {old}" in service.log()
    assert "JPUSHARE_SLURM_PREFIX" in service.log()
