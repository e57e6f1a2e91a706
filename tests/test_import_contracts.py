"""The import contracts of pyproject.toml (`make lint` runs `lint-imports`) hold on the tree,
and each kind of break we mean them to catch does break them: on a copy of the package with
one import added, `lint-imports` fails and names the contract and the import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(src: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(ROOT / "pyproject.toml")],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_tree_keeps_every_contract() -> None:
    done = lint_imports(ROOT / "src")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


BREAKS = {
    "executors import the store": (
        "executors/base.py",
        "from jpushare.store import schema",
        "jpushare.executors is not allowed to import jpushare.store",
    ),
    "the store imports the simulator": (
        "store/cluster_setup.py",
        "from jpushare.sim import engine",
        "jpushare.store is not allowed to import jpushare.sim",
    ),
    "the client imports the server": (
        "client/formatting.py",
        "from jpushare.policy import model",
        "jpushare.client is not allowed to import jpushare.policy",
    ),
    "the policy reads the clock": (
        "policy/fit.py",
        "import time",
        "jpushare.policy is not allowed to import time",
    ),
    "the ledger reads the clock": (
        "ledger/charges.py",
        "import datetime",
        "jpushare.ledger is not allowed to import datetime",
    ),
    "the ledger imports the store": (
        "ledger/states.py",
        "from jpushare.store import schema",
        "jpushare.ledger is not allowed to import jpushare.store",
    ),
    "the API imports the dispatcher, lazily": (
        "api/why.py",
        "def _late() -> None:\n    from jpushare.dispatcher import cycle",
        "jpushare.api is not allowed to import jpushare.dispatcher",
    ),
    "a top-level module no layer names": (
        "newcomer.py",
        "X = 1",
        "jpushare.newcomer",
    ),
}


@pytest.mark.parametrize("case", BREAKS)
def test_a_planted_import_breaks_its_contract(case: str, tmp_path: Path) -> None:
    path, line, message = BREAKS[case]
    package = tmp_path / "jpushare"
    shutil.copytree(
        ROOT / "src" / "jpushare", package, ignore=shutil.ignore_patterns("__pycache__")
    )
    target = package / path
    before = target.read_text() if target.exists() else ""
    target.write_text(f"{before}\n{line}  # noqa\n")

    done = lint_imports(tmp_path)

    assert done.returncode == 1, done.stdout + done.stderr
    assert message in done.stdout
