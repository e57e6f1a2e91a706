"""The parallel run's grouping (tests/conftest.py): each Slurm cluster's tests go out as one
unit, so no two of them ever run at once; every other test goes out alone. A test marked
`slurm` in a file the grouping cannot see stops the run (checked at every collection)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import PEER_GROUP, ROOT, SLURM_GROUP, scope_of


def test_the_slurm_files_are_one_unit_the_peer_cluster_another_and_the_rest_single() -> None:
    assert scope_of("tests/e2e_slurm/test_scenarios.py::test_s4[x]") == SLURM_GROUP
    assert scope_of("tests/executors/test_slurm_executor.py::test_a") == SLURM_GROUP
    assert scope_of("tests/executors/test_slurm_lost_runs.py::test_b") == SLURM_GROUP
    assert scope_of("tests/replay/test_fidelity_slurm.py::test_c") == SLURM_GROUP
    assert scope_of("tests/slurm_peer/test_live_peer.py::test_d") == PEER_GROUP
    # the peer's parsing tests read captured output only: any worker may take them
    one = "tests/slurm_peer/test_driver.py::test_e"
    assert scope_of(one) == one
    two = "tests/replay/test_fidelity_local.py::test_f[sqlite]"
    assert scope_of(two) == two


def collect(folder: Path) -> subprocess.CompletedProcess[str]:
    """`pytest --collect-only` of `folder` with this project's conftest as a plugin."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "tests.conftest"],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_slurm_test_the_grouping_cannot_see_stops_the_collection(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers = slurm: a live cluster\n")
    (tmp_path / "test_seen.py").write_text(
        "import pytest\n\n\n@pytest.mark.slurm\ndef test_seen():\n    pass\n"
    )
    assert collect(tmp_path).returncode == 0
    (tmp_path / "test_hidden.py").write_text(
        "import pytest as p\n\n\n@p.mark.slurm\ndef test_hidden():\n    pass\n"
    )
    done = collect(tmp_path)
    assert done.returncode != 0
    assert "test_hidden.py::test_hidden is marked slurm" in done.stdout + done.stderr
