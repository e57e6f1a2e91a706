"""The executor contract (tests/executors/contract.py) run against the local executor: with
the cgroups it finds (under root: each run in its own), and without any, as a service that
is not root runs its jobs (process groups and rlimits)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jpushare.executors.cgroups import Cgroups
from jpushare.executors.gpus import LocalGpu
from jpushare.executors.local import LocalExecutor
from tests.executors.cgroup_cleanup import remove_cgroups
from tests.executors.contract import ContractTarget, ProcessContract


def _target(tmp_path: Path, cgroups: Cgroups | None) -> Iterator[ContractTarget]:
    gpus = [LocalGpu("ws1", i, "rtx4090") for i in range(4)]
    executor = LocalExecutor(tmp_path / "state", gpus=gpus, cancel_grace_s=1.0, cgroups=cgroups)
    shared = tmp_path / "shared"
    shared.mkdir()
    yield ContractTarget(executor, node="ws1", gpu_type="rtx4090", shared_dir=shared)
    remove_cgroups(tmp_path / "state")


class TestLocalExecutorContract(ProcessContract):
    @pytest.fixture
    def target(self, tmp_path: Path) -> Iterator[ContractTarget]:
        yield from _target(tmp_path, None)


class TestLocalExecutorWithoutCgroupsContract(ProcessContract):
    @pytest.fixture
    def target(self, tmp_path: Path) -> Iterator[ContractTarget]:
        yield from _target(tmp_path, Cgroups("none", "unused", why="not asked for"))
