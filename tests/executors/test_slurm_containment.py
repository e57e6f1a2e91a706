"""What Slurm's cgroup plugins keep a job to, on the fake cluster.

The cluster (scripts/slurm/start-fake-cluster.sh) runs proctrack/cgroup and task/cgroup
with ConstrainRAMSpace and ConstrainDevices (its cgroup.conf), as the README asks of a
site. A job started through `SlurmExecutor` therefore opens only the GPUs it was given
(the fake GPUs are character devices no driver answers: its own fails with ENXIO,
another's with EPERM from the device cgroup), and nothing it starts outlives its end: a
`setsid` child dies with a cancel and with the end of the batch script, as Slurm's
proctrack kills the job's whole cgroup.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpushare.executors.base import LaunchSpec, RunInfo, RunState
from jpushare.executors.slurm import SlurmExecutor
from tests.executors.contract import wait_for
from tests.executors.live_slurm import cluster_guard, session_prefix, shared_dir
from tests.marked_processes import live_with_marker

pytestmark = pytest.mark.slurm

PREFIX = session_prefix()
WAIT_S = 30.0
FAKE_ROOT = Path(os.environ.get("FAKE_SLURM_ROOT", "/var/lib/slurm-fake"))
CGROUP_CONF = Path("/etc/slurm/cgroup.conf")


@pytest.fixture(scope="module", autouse=True)
def _cluster() -> Iterator[None]:
    yield from cluster_guard(PREFIX)


@pytest.fixture(scope="module")
def executor(tmp_path_factory: pytest.TempPathFactory) -> SlurmExecutor:
    return SlurmExecutor(shared_dir(tmp_path_factory, "slurm-box"), name_prefix=PREFIX)


def _spec(command: str, num_gpus: int = 1) -> LaunchSpec:
    job_id = f"box{uuid.uuid4().hex[:10]}"
    return LaunchSpec(
        job_id=job_id,
        attempt=1,
        name=f"box {job_id}",
        command=command,
        node="node-b",
        gpu_type="rtx5090",
        num_gpus=num_gpus,
        partition="gpu",
    )


def _wait(ex: SlurmExecutor, s: LaunchSpec, *states: RunState) -> RunInfo:
    def probe() -> RunInfo | None:
        info = ex.find(s.job_id, s.attempt)
        return info if info is not None and info.state in states else None

    return wait_for(probe, WAIT_S, 0.2, f"{s.job_id} in {states}")


def _escape_command(marker: str, then: str) -> str:
    """Start a `setsid` child that would outlive the job, say so, then `then`."""
    return f"setsid sleep {marker} </dev/null >/dev/null 2>&1 & sleep 1; echo escaped; {then}"


def _new_marker() -> str:
    return f"1001.{uuid.uuid4().int % 10**9:09d}"  # a number `sleep` takes, unique


def test_the_fake_cluster_constrains_devices_and_memory() -> None:
    conf = CGROUP_CONF.read_text()
    assert re.search(r"^ConstrainDevices=yes$", conf, re.MULTILINE), conf
    assert re.search(r"^ConstrainRAMSpace=yes$", conf, re.MULTILINE), conf


def test_a_job_opens_only_its_own_gpu(executor: SlurmExecutor) -> None:
    probe = (
        "python3 -c '\n"
        "import errno, os, glob\n"
        f'for path in sorted(glob.glob("{FAKE_ROOT}/dev/node-b/nvidia*")):\n'
        "    try:\n"
        "        os.close(os.open(path, os.O_RDONLY))\n"
        '        what = "OPENED"\n'
        "    except OSError as exc:\n"
        "        what = errno.errorcode[exc.errno]\n"
        '    print("dev", path.rsplit("nvidia", 1)[1], what)\n'
        'print("gpus", os.environ.get("SLURM_JOB_GPUS"))\n'
        "'"
    )
    s = _spec(probe)
    executor.submit(s)
    assert _wait(executor, s, RunState.COMPLETED, RunState.FAILED).state is RunState.COMPLETED
    out = executor.log(s.job_id, 1)
    own = re.search(r"^gpus (\d+)$", out, re.MULTILINE)
    assert own is not None, out
    seen = dict(re.findall(r"^dev (\d+) (\w+)$", out, re.MULTILINE))
    assert len(seen) == 4, out
    # Its own GPU passes the device cgroup (no driver: ENXIO); every other is denied.
    assert seen.pop(own.group(1)) == "ENXIO", out
    assert set(seen.values()) == {"EPERM"}, out


def test_a_setsid_child_dies_with_a_cancel(executor: SlurmExecutor) -> None:
    marker = _new_marker()
    s = _spec(_escape_command(marker, "sleep 600"))
    run = executor.submit(s)
    _wait(executor, s, RunState.RUNNING)
    wait_for(lambda: live_with_marker(marker) or None, WAIT_S, 0.2, "the setsid child to start")

    executor.cancel(run)

    _wait(executor, s, RunState.CANCELLED)
    wait_for(lambda: not live_with_marker(marker), WAIT_S, 0.2, "the setsid child to be killed")


def test_a_setsid_child_dies_when_the_job_completes(executor: SlurmExecutor) -> None:
    marker = _new_marker()
    s = _spec(_escape_command(marker, "exit 0"))
    executor.submit(s)

    assert _wait(executor, s, RunState.COMPLETED, RunState.FAILED).state is RunState.COMPLETED
    assert "escaped" in executor.log(s.job_id, 1)
    wait_for(lambda: not live_with_marker(marker), WAIT_S, 0.2, "the setsid child to be killed")
