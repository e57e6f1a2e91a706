"""The service's state is its own: a state directory or SQLite file that a user made (in a
place they can write, before the service first starts) would give that user the database
(make themselves admin) and the run records. `jpushare serve` refuses to start on one, in
one line with exit code 2, before it touches it. Root only (the accounts are made here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unix_accounts import MadeAccount, made_accounts, require_root


@pytest.fixture
def student() -> Iterator[MadeAccount]:
    require_root("a state directory of another account needs root to make")
    with made_accounts("b") as accounts:
        yield accounts["b"]


@pytest.fixture
def top() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="jpst-state-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def _serve(state: Path, url: str | None = None) -> str:
    """`jpushare serve`'s one line on stderr; fails unless it exits 2 (a service that
    starts is killed after the timeout)."""
    env = {"PATH": os.environ["PATH"], "JPUSHARE_STATE_DIR": str(state), "JPUSHARE_PORT": "0"}
    if url is not None:
        env["JPUSHARE_DATABASE_URL"] = url
    argv = [sys.executable, "-m", "jpushare.service", "serve", "--no-api"]
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the service started on a state it does not own")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_a_state_directory_of_another_account_is_refused(top: Path, student: MadeAccount) -> None:
    state = top / "state"
    state.mkdir(mode=0o777)
    os.chown(state, student.uid, student.gid)
    assert "state directory" in _serve(state)
    assert not (state / "jpushare.sqlite").exists()


def test_a_sqlite_file_of_another_account_is_refused(top: Path, student: MadeAccount) -> None:
    state = top / "state"
    state.mkdir(mode=0o700)
    elsewhere = top / "db"
    elsewhere.mkdir(mode=0o777)
    db = elsewhere / "jpushare.sqlite"
    db.touch()
    os.chown(db, student.uid, student.gid)
    assert "database" in _serve(state, f"sqlite:///{db}")
    assert db.stat().st_size == 0  # never migrated: the service did not use it
