"""The Slurm executor runs a job as its owner (`sbatch --uid/--gid`), in the owner's
directory, with the submitter's environment, its files the owner's. On the fake cluster
(its slurmd runs as root on this machine, so local accounts exist on the "nodes"); root
only. Skips without a cluster or root, fails under CI=true."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jpushare.executors.base import LaunchSpec, RunState, SubmitRefused
from jpushare.executors.slurm import SlurmExecutor
from tests.executors.live_slurm import cluster_guard, session_prefix
from tests.unix_accounts import MadeAccount, made_accounts, require_root

pytestmark = pytest.mark.slurm
PREFIX = session_prefix()
TIMEOUT_S = 60.0


@pytest.fixture(scope="module", autouse=True)
def _cluster() -> Iterator[None]:
    yield from cluster_guard(PREFIX)


@pytest.fixture
def owner() -> Iterator[MadeAccount]:
    require_root("sbatch --uid needs root")
    with made_accounts("slurm") as accounts:
        yield accounts["slurm"]


@pytest.fixture
def executor(tmp_path: Path) -> SlurmExecutor:
    ex = SlurmExecutor(tmp_path / "logs", name_prefix=PREFIX)
    assert ex.submit_as_user  # root: jobs run as their owners by default
    return ex


def _spec(owner: MadeAccount, command: str, workdir: str, **run: Any) -> LaunchSpec:
    job_id = f"owner{time.monotonic_ns() % 10**9}"
    return LaunchSpec(
        job_id=job_id,
        attempt=1,
        name="as-owner",
        command=command,
        node="node-c",
        gpu_type="rtx4090",
        num_gpus=1,
        partition="gpu",
        user="someone",
        unix_user=owner.name,
        workdir=workdir,
        **run,
    )


def _ended(executor: SlurmExecutor, spec: LaunchSpec) -> RunState:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        info = executor.find(spec.job_id, spec.attempt)
        if info is not None and info.state.ended:
            return info.state
        time.sleep(0.2)
    pytest.fail(f"{spec.job_id} did not end in {TIMEOUT_S} s")


def test_the_job_runs_as_its_owner_where_and_with_what_they_submitted(
    executor: SlurmExecutor, owner: MadeAccount
) -> None:
    workdir = Path(owner.home) / "proj"
    workdir.mkdir()
    os.chown(workdir, owner.uid, owner.gid)
    spec = _spec(
        owner,
        'echo "uid=$(id -u) gid=$(id -g) pwd=$(pwd) myvar=$MYVAR user=$USER home=$HOME '
        'svc=${JPUSHARE_DATABASE_URL-unset}"; touch made-by-job',
        str(workdir),
        environment={"PATH": "/usr/bin:/bin", "MYVAR": "from the submitter"},
    )
    os.environ["JPUSHARE_DATABASE_URL"] = "postgresql://service-secret"
    try:
        executor.submit(spec)
    finally:
        del os.environ["JPUSHARE_DATABASE_URL"]
    assert _ended(executor, spec) is RunState.COMPLETED
    out = workdir / f"jpushare-{spec.job_id}.out"
    deadline = time.monotonic() + 10
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert out.read_text().strip() == (
        f"uid={owner.uid} gid={owner.gid} pwd={workdir} myvar=from the submitter "
        f"user={owner.name} home={owner.home} svc=unset"
    )
    for made in (out, workdir / "made-by-job"):
        st = made.stat()
        assert (st.st_uid, st.st_gid) == (owner.uid, owner.gid), made
    assert stat.S_IMODE(out.stat().st_mode) == 0o600  # SLURM_UMASK=0077, not ours (022)
    assert executor.log(spec.job_id, 1).startswith(f"uid={owner.uid} ")


def test_a_directory_the_owner_cannot_enter_is_refused_before_sbatch(
    executor: SlurmExecutor, owner: MadeAccount, tmp_path: Path
) -> None:
    private = tmp_path / "root-only"
    private.mkdir(mode=0o700)
    spec = _spec(owner, "true", str(private), environment={})
    with pytest.raises(SubmitRefused, match="the working directory: Permission denied"):
        executor.submit(spec)
    assert executor.find(spec.job_id, 1) is None


def test_an_account_that_does_not_exist_is_refused(executor: SlurmExecutor) -> None:
    require_root("sbatch --uid needs root")
    ghost = MadeAccount("jpst-no-such-account", 0, 0, "/nonexistent")
    with pytest.raises(SubmitRefused, match="no Unix account 'jpst-no-such-account'"):
        executor.submit(_spec(ghost, "true", "/tmp", environment={}))
