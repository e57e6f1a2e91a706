"""The executor contract (tests/executors/contract.py) run against the Slurm executor.

On the fake cluster of scripts/slurm/start-fake-cluster.sh: placement node-c / rtx4090
(4 GPUs) in partition `gpu`. Skips without a cluster, fails under CI=true.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jpushare.executors.slurm import SlurmExecutor
from tests.executors.contract import ContractTarget, ProcessContract
from tests.executors.live_slurm import cluster_guard, session_prefix, shared_dir

PREFIX = session_prefix()


@pytest.fixture(scope="module", autouse=True)
def _cluster() -> Iterator[None]:
    yield from cluster_guard(PREFIX)


class TestSlurmExecutorContract(ProcessContract):
    pytestmark = pytest.mark.slurm

    @pytest.fixture
    def target(self, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContractTarget]:
        shared = shared_dir(tmp_path_factory, "slurm-contract")
        executor = SlurmExecutor(shared / "logs", name_prefix=PREFIX)
        yield ContractTarget(
            executor,
            node="node-c",
            gpu_type="rtx4090",
            partition="gpu",
            shared_dir=shared,
            timeout_s=30,
            poll_s=0.2,
        )
