"""The parallel run's grouping (tests/conftest.py): each Slurm cluster's tests go out as one
unit, so no two of them ever run at once; every other test goes out alone."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import PEER_GROUP, ROOT, SLURM_GROUP, file_group, scope_of


def test_the_slurm_files_are_one_unit_the_peer_cluster_another_and_the_rest_single() -> None:
    assert scope_of("tests/e2e_slurm/test_scenarios.py::test_s4[x]") == SLURM_GROUP
    assert scope_of("tests/executors/test_slurm_executor.py::test_a") == SLURM_GROUP
    assert scope_of("tests/replay/test_fidelity_slurm.py::test_b") == SLURM_GROUP
    assert scope_of("tests/slurm_peer/test_live_peer.py::test_c") == PEER_GROUP
    # the Slurm parsing tests read captured output only: any worker may take them
    one = "tests/slurm_peer/test_driver.py::test_d"
    assert scope_of(one) == one
    two = "tests/replay/test_fidelity_local.py::test_e[sqlite]"
    assert scope_of(two) == two


def test_every_test_marked_slurm_is_in_a_file_of_a_group() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slurm"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    files = {line.split("::", 1)[0] for line in done.stdout.splitlines() if "::" in line}
    assert len(files) >= 9, done.stdout  # the executor, e2e, replay and peer Slurm files
    assert {f: file_group(f) for f in files if file_group(f) is None} == {}
