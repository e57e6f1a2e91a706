"""The Slurm executor's log directory, where users' jobs may write (jobs without a working
directory send their output there, so their owners must be able to write it: README,
"Slurm"). Whatever a user plants there must not make the root service read, write or
trust what that user could not: a symlink named like a run's output or record, a record
forged for their own job that names another account and its file. Root only (the flaws
are root's); no cluster needed (`log` reads files, `submit` runs a scripted sbatch).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from jpushare.executors.base import LaunchSpec
from jpushare.executors.slurm import SlurmExecutor
from jpushare.executors.slurm_commands import CommandResult
from tests.unix_accounts import MadeAccount, made_accounts, require_root

SECRET = "root-only secret\n"


@pytest.fixture
def student() -> Iterator[MadeAccount]:
    require_root("the log directory's flaws are the root service's")
    with made_accounts("b") as accounts:
        yield accounts["b"]


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "root-secret"
    path.write_text(SECRET)
    path.chmod(0o600)
    return path


def _runner(
    argv: Sequence[str], stdin: str | None, env: Mapping[str, str], timeout_s: float
) -> CommandResult:
    return CommandResult(0, "90\n" if "sbatch" in argv[0] else "", "")


@pytest.fixture
def ex() -> Iterator[SlurmExecutor]:
    """An executor whose log directory every user may write (sticky, like /tmp), in a
    directory they can reach (pytest's own are root's, 0700)."""
    top = Path(tempfile.mkdtemp(prefix="jpst-logs-", dir="/tmp"))
    try:
        top.chmod(0o755)
        logs = top / "logs"
        logs.mkdir()
        logs.chmod(0o1777)
        yield SlurmExecutor(logs, runner=_runner, submit_as_user=True)
    finally:
        shutil.rmtree(top)


def _as(user: MadeAccount, fn: object) -> None:
    """Run `fn()` in a child process as `user` (what their job on the node could do)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setresgid(user.gid, user.gid, user.gid)
            os.setresuid(user.uid, user.uid, user.uid)
            fn()  # type: ignore[operator]
        except BaseException:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_symlink_as_a_runs_output_is_not_read_as_root(
    ex: SlurmExecutor, student: MadeAccount, secret: Path
) -> None:
    """A job without a working directory writes `<log dir>/jps-<job>-<n>.out` as its owner,
    who can replace it by a symlink to any file; `jpushare log` must not follow it as root."""
    out = ex.log_path("9", 1)
    _as(student, lambda: os.symlink(secret, out))
    assert SECRET not in ex.log("9", 1)


def test_a_record_forged_by_a_user_is_not_trusted(
    ex: SlurmExecutor, student: MadeAccount, secret: Path
) -> None:
    """The record says whose file to read and as whom; one the service did not write (a
    user's, for their own job) names root and root's file: it must be ignored."""
    record = ex.log_dir / "jps-9-1.run.json"
    forged = {"output": str(secret), "error": None, "output_offset": 0, "account": "root"}
    _as(student, lambda: record.write_text(json.dumps(forged)))
    assert SECRET not in ex.log("9", 1)


def test_a_planted_symlink_does_not_redirect_the_records_write(
    ex: SlurmExecutor, student: MadeAccount, secret: Path
) -> None:
    """The record is written through a temporary file: a symlink planted at its name must
    not make root truncate and overwrite the file it points to."""
    workdir = Path(student.home)
    for name in ("jps-9-1.run.json", ".jps-9-1.run.json.tmp"):
        _as(student, lambda name=name: os.symlink(secret, ex.log_dir / name))
    spec = LaunchSpec(
        job_id="9",
        attempt=1,
        name="x",
        command="true",
        node="node-a",
        gpu_type="rtx4090",
        num_gpus=1,
        unix_user=student.name,
        workdir=str(workdir),
        environment={},
    )
    assert ex.submit(spec) == "90"
    assert secret.read_text() == SECRET
    record = json.loads((ex.log_dir / "jps-9-1.run.json").read_text())
    assert record["account"] == student.name
