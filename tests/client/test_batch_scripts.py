"""Real-looking Slurm scripts (tests/client/slurm_scripts/) under `jpushare submit` as a
Slurm user expects: directives read as sbatch reads them, the command line winning, the
script run by its own interpreter line with its exit code; sbatch's spellings, Slurm's
state names, `queue --me` and `squeue`. Through the CLI against a real server (both
databases); the stored command is run by a real shell."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from jpushare.client.arguments import state
from jpushare.client.batch_script import BatchScriptError, read_directives
from tests.client.test_cli_server import Served, cli, served  # noqa: F401 (the fixture)
from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401

SCRIPTS = Path(__file__).parent / "slurm_scripts"


def test_directives_stop_at_the_first_command_and_unknown_ones_are_warned() -> None:
    read = read_directives((SCRIPTS / "train.sh").read_text(), {"--gpus", "--time", "-J",
                           "--output", "--mem-per-gpu"}, "train.sh")  # fmt: skip
    assert read.words == ["--gpus=2", "--time=00:01:00", "-J", "mytrain",
                          "--output=train-%j.out", "--mem-per-gpu=8G"]  # fmt: skip
    assert read.warnings == [
        "train.sh:5: #SBATCH --account ignored: the lab is your account's (fair share is per lab)"
    ]


def test_a_directive_that_cannot_be_honoured_is_an_error_with_the_reason() -> None:
    with pytest.raises(BatchScriptError, match=r"two_nodes.sh:2: #SBATCH --nodes: a job runs "
                       "on one node here"):  # fmt: skip
        read_directives((SCRIPTS / "two_nodes.sh").read_text(), {"--gpus"}, "two_nodes.sh")
    with pytest.raises(BatchScriptError, match="first line must start with #!"):
        read_directives("echo hi\n", set())


def run_stored(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The job's command as an executor runs it (`bash -c`), its TMPDIR `cwd`."""
    bash = shutil.which("bash") or "/bin/bash"
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(cwd)}
    return subprocess.run([bash, "-c", command], cwd=cwd, capture_output=True, text=True,
                          timeout=30, env=env)  # fmt: skip


def test_a_script_with_directives_is_the_job_it_asks_for_and_runs_as_itself(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    node = tmp_path / "node"
    node.mkdir()
    code, out, err = cli(served, "alice", "submit", "--json", str(SCRIPTS / "train.sh"),
                         "--lr", "0.1 x", capsys=capsys)  # fmt: skip
    assert code == 0, err
    job = json.loads(out)
    assert (job["name"], job["num_gpus"], job["time_limit_s"]) == ("mytrain", 2, 60.0)
    assert job["mem_per_gpu_mb"] == 8192 and job["output_path"] == "train-%j.out"
    assert "warning: train.sh:5: #SBATCH --account ignored" in err
    done = run_stored(job["command"], node)
    assert done.returncode == 3  # the script's own exit code
    assert done.stdout == "training with 2 args: --lr 0.1 x\n"
    assert list(node.iterdir()) == []  # the script's temporary copy is gone

    # the command line wins over the script; a python script runs with python (its #! line)
    code, out, err = cli(served, "alice", "submit", "--json", "-G", "1", "-J", "eval",
                         str(SCRIPTS / "evaluate"), "ckpt", capsys=capsys)  # fmt: skip
    assert code == 0, err
    job = json.loads(out)
    assert (job["name"], job["num_gpus"], job["min_tier"]) == ("eval", 1, "rtx5090")
    assert job["time_limit_s"] == 1800.0
    done = run_stored(job["command"], node)
    assert (done.returncode, done.stdout) == (0, "evaluating ['ckpt']\n")

    code, _, err = cli(served, "alice", "submit", str(SCRIPTS / "two_nodes.sh"), capsys=capsys)
    assert code == 2 and "#SBATCH --nodes: a job runs on one node here" in err


def test_sbatch_spellings_wrap_and_partition(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = cli(served, "alice", "submit", "--json", "--gres", "gpu:rtx4090:2", "-p",
                         "p4090,p5090", "--wrap", "nvidia-smi -L", capsys=capsys)  # fmt: skip
    assert code == 0, err
    job = json.loads(out)
    assert (job["command"], job["num_gpus"], job["min_tier"]) == ("nvidia-smi -L", 2, "rtx4090")
    code, _, err = cli(served, "alice", "submit", "-p", "p4090", "-G", "1", "--", "true",
                       capsys=capsys)  # fmt: skip
    assert code == 2 and "partition 'p4090' is not a minimum tier" in err and "rtx5090" in err
    code, _, err = cli(served, "alice", "submit", "-G", "2", "--gpus-per-node", "1", "--",
                       "true", capsys=capsys)  # fmt: skip
    assert code == 2 and "the GPU options disagree: --gpus 2, --gpus-per-node 1" in err


def test_slurm_state_names_queue_me_and_squeue(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert [state(s) for s in ("PENDING", "pd", "R", "CD", "F", "CA")] == [
        "GLOBAL_QUEUE_WAIT", "GLOBAL_QUEUE_WAIT", "RUNNING", "COMPLETED", "FAILED", "CANCELLED",
    ]  # fmt: skip
    for user in ("alice", "bob", "alice"):
        assert cli(served, user, "submit", "-G", "1", "--", "true", capsys=capsys)[0] == 0
    code, out, _ = cli(served, "alice", "queue", "--me", capsys=capsys)
    assert code == 0
    assert [line.split()[1] for line in out.splitlines()[1:-1]] == ["1", "3"]
    assert "(2 of 2 selected; 3 queued)" in out
    code, out, _ = cli(served, "alice", "jobs", "-u", "bob", "-s", "PD", capsys=capsys)
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["2"]
    served.busy.clear()
    served.cycle()
    code, out, _ = cli(served, "alice", "squeue", capsys=capsys)
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == ["JOBID", "TIER", "NAME", "USER", "ST", "TIME", "GPUS",
                              "NODELIST(REASON)"]  # fmt: skip
    assert [(r.split()[0], r.split()[4]) for r in rows] == [("1", "CF"), ("2", "CF"), ("3", "CF")]
