"""The executor contract's protocol part (tests/executors/contract.py) run against the
in-memory executor of the tests, on a manual clock that moves only while the suite waits."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.executors.contract import ContractTarget, ExecutorContract
from tests.memory_executor import ManualClock, MemoryExecutor, MemoryGpus


class TestMemoryExecutorContract(ExecutorContract):
    @pytest.fixture
    def target(self, tmp_path: Path) -> ContractTarget:
        clock = ManualClock()
        executor = MemoryExecutor([MemoryGpus("ws1", "rtx4090", 4)], clock)
        return ContractTarget(
            executor,
            node="ws1",
            gpu_type="rtx4090",
            shared_dir=tmp_path,
            command=executor.command,
            pause=lambda: clock.advance(0.05),
        )
