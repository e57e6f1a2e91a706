"""What a job's submitter controls must not reach the `sbatch` the service runs.

The service runs sbatch as root (or SlurmUser) for every job. The job's environment is the
submitter's (`--export ALL`): were it sbatch's own process environment, the submitter's
PATH would choose which `sbatch` root runs, and LD_PRELOAD would load their code into it.
These tests run the real subprocess path with stand-in commands (no cluster needed): an
`sbatch` on the service's PATH that records what it got, and a trap `sbatch` on the job's.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from jpushare.executors.base import LaunchSpec
from jpushare.executors.slurm import SlurmExecutor
from jpushare.executors.slurm_commands import SlurmCommands


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def _service(tmp_path: Path) -> tuple[SlurmExecutor, Path, Path]:
    """An executor whose PATH has a recording `sbatch`; its record file; the trap dir."""
    service_bin = tmp_path / "service-bin"
    service_bin.mkdir()
    record = tmp_path / "sbatch-saw"
    _script(
        service_bin / "sbatch",
        f'env > "{record}.env"\ncat > "{record}.script"\necho 77\n',
    )
    squeue = _script(service_bin / "squeue", "exit 0\n")
    executor = SlurmExecutor(
        tmp_path / "logs",
        commands=SlurmCommands(squeue=str(squeue)),  # sbatch: the bare name, looked up
        submit_as_user=False,
        env={"PATH": f"{service_bin}:/usr/bin:/bin", "JPUSHARE_DATABASE_URL": "secret"},
    )
    trap_bin = tmp_path / "job-bin"
    trap_bin.mkdir()
    return executor, record, trap_bin


def _spec(workdir: Path, environment: dict[str, str]) -> LaunchSpec:
    return LaunchSpec(
        job_id="7",
        attempt=1,
        name="x",
        command="echo hi",
        node="node-a",
        gpu_type="rtx4090",
        num_gpus=1,
        workdir=str(workdir),
        environment=environment,
    )


def _env_of(record: Path) -> dict[str, str]:
    lines = Path(f"{record}.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_the_jobs_path_and_loader_variables_do_not_reach_sbatch(tmp_path: Path) -> None:
    executor, record, trap_bin = _service(tmp_path)
    pwned = tmp_path / "pwned"
    _script(trap_bin / "sbatch", f'touch "{pwned}"\necho 66\n')
    evil_lib = tmp_path / "evil.so"  # need not exist: its name reaching sbatch is the flaw
    job_env = {
        "PATH": f"{trap_bin}:/usr/bin:/bin",
        "LD_PRELOAD": str(evil_lib),
        "LD_LIBRARY_PATH": str(tmp_path),
        "BASH_ENV": str(tmp_path / "rc"),
        "MYVAR": "it's $HOME\nline two",
    }

    assert executor.submit(_spec(tmp_path, job_env)) == "77"

    assert not pwned.exists(), "the job's PATH chose the sbatch the service ran"
    seen = _env_of(record)
    for name in ("LD_PRELOAD", "LD_LIBRARY_PATH", "BASH_ENV", "MYVAR"):
        assert name not in seen, f"{name} of the job reached sbatch's own environment"
    assert str(trap_bin) not in seen["PATH"]
    assert "JPUSHARE_DATABASE_URL" not in seen
    assert seen["SLURM_UMASK"] == "0077"


def test_the_job_still_gets_its_environment_through_the_script(tmp_path: Path) -> None:
    """sbatch's --export=ALL habit kept: the variables arrive, exactly, in the job."""
    executor, record, _ = _service(tmp_path)
    job_env = {"PATH": "/opt/x/bin:/usr/bin", "MYVAR": "it's $HOME\nline 'two'", "EMPTY": ""}
    executor.submit(_spec(tmp_path, job_env))
    script = Path(f"{record}.script").read_text()
    dump = tmp_path / "dump.json"
    # The script's exports, run by bash, then the variables read back.
    prelude = script.replace("echo hi\n", "")
    code = (
        f"{prelude}\npython3 -c 'import json,os; json.dump(dict(os.environ), "
        f'open("{dump}", "w"))\'\n'
    )
    runner = _script(tmp_path / "run.sh", "")
    runner.write_text(code)
    os.chmod(runner, stat.S_IRWXU)
    assert os.system(f"env -i /bin/bash {runner}") == 0
    got = json.loads(dump.read_text())
    for name, value in job_env.items():
        assert got[name] == value
    assert got["JPUSHARE_JOB_ID"] == "7"
