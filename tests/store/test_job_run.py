"""A job's directory, environment, files and CPU/memory request: stored at submit, checked,
and handed to the dispatcher with its tier's defaults where it asked for none."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from jpushare import store
from jpushare.run_settings import MAX_ENV_BYTES, JobRun
from jpushare.store.observations import dispatched_launches
from jpushare.store.schema import GpuTier, User
from tests.store.conftest import ALL_BUSY, World, at, run_cycle

ONE_FREE = {**ALL_BUSY, ("node-b", "rtx4090"): 3}


def _submit(world: World, run: JobRun) -> int:
    with world.sessions.begin() as s:
        return store.submit(
            s,
            user_id=world.alice.id,
            name="j",
            command="python train.py",
            num_gpus=1,
            now=at(0),
            run=run,
        ).job.id


def test_the_dispatch_carries_the_owner_and_how_the_job_runs(world: World) -> None:
    with world.sessions.begin() as s:
        s.execute(update(User).where(User.id == world.alice.id).values(unix_user="alice_u"))
        s.execute(
            update(GpuTier)
            .where(GpuTier.name == "rtx4090")
            .values(cpus_per_gpu=8, mem_per_gpu_mb=4096)
        )
    run = JobRun(
        workdir="/home/alice/proj",
        environment={"MYVAR": "x"},
        output_path="o-%j.txt",
        error_path=None,
        cpus_per_gpu=2,  # its own; memory: the tier's
    )
    job = _submit(world, run)
    with world.sessions() as s:
        stored = store.get_job(s, job)
    assert (stored.workdir, stored.environment, stored.output_path) == (
        "/home/alice/proj",
        {"MYVAR": "x"},
        "o-%j.txt",
    )
    _, recorded = run_cycle(world, 1, ONE_FREE)
    (d,) = recorded.dispatched
    assert (d.unix_user, d.workdir, d.environment, d.output_path, d.error_path) == (
        "alice_u",
        "/home/alice/proj",
        {"MYVAR": "x"},
        "o-%j.txt",
        None,
    )
    assert (d.cpus_per_gpu, d.mem_per_gpu_mb) == (2, 4096)
    with world.sessions() as s:
        assert dispatched_launches(s, [job]) == [d]  # a resubmit launches it alike


def test_a_job_from_before_0003_has_no_run_settings(world: World) -> None:
    job = _submit(world, JobRun())
    _, recorded = run_cycle(world, 1, ONE_FREE)
    (d,) = recorded.dispatched
    assert d.job_id == job and (d.workdir, d.environment, d.cpus_per_gpu) == (None, None, None)


@pytest.mark.parametrize(
    "run",
    [
        JobRun(workdir="relative"),
        JobRun(environment={"A": "b"}),  # no directory
        JobRun(workdir="/w", environment={"A B": "x"}),
        JobRun(workdir="/w", environment={"BIG": "x" * 100_000, "BIG2": "y" * 100_000,
               "BIG3": "z" * 100_000, "BIG4": "w" * 100_000, "BIG5": "v" * 100_000,
               "BIG6": "u" * (MAX_ENV_BYTES - 500_000)}),
        JobRun(workdir="/w", cpus_per_gpu=0),
        JobRun(workdir="/w", mem_per_gpu_mb=10 << 30),
    ],
)  # fmt: skip
def test_bad_settings_are_refused_and_nothing_is_stored(world: World, run: JobRun) -> None:
    with pytest.raises(store.InvalidRequest):
        _submit(world, run)
    with world.sessions() as s:
        assert store.list_jobs(s) == []
