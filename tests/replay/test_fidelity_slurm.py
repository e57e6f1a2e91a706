"""Fidelity with the Slurm executor on the fake cluster (tests/replay/fidelity.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.executors.live_slurm import cancel_prefixed, require_cluster, session_prefix
from tests.replay.conftest import Running, serve
from tests.replay.fidelity import SLURM, replay_and_compare


@pytest.fixture
def slurm_service(tmp_path: Path) -> Iterator[Running]:
    require_cluster()  # fails under CI=true when the fake cluster is not there
    prefix = session_prefix()
    try:
        yield from serve(
            tmp_path,
            1.0,  # a Slurm cycle (sinfo, squeue, sbatch) takes a few hundred ms here
            JPUSHARE_EXECUTOR="slurm",
            JPUSHARE_SLURM_PREFIX=prefix,
            JPUSHARE_SLURM_LOG_DIR=str(tmp_path / "slurm-logs"),
        )
    finally:
        cancel_prefixed(prefix)


@pytest.mark.slurm
@pytest.mark.quiet  # a second of delay is 40 trace seconds: not beside other tests
def test_the_simulator_predicts_the_service_with_the_slurm_executor(
    slurm_service: Running, tmp_path: Path
) -> None:
    replay_and_compare(slurm_service, tmp_path, SLURM)
