"""Runs squeue has forgotten (ended more than `MinJobAge` ago): `sacct`, or "outcome unknown".

The sacct answers below are HAND-WRITTEN from Slurm's documented `sacct -n -P` format
(fields joined by "|", no header; `State` like `CANCELLED by 0`; `ExitCode` as
`code:signal`; step rows `ID.batch` / `ID.extern`): the fake cluster has no slurmdbd, so
no sacct output could be captured there. What the fake cluster does answer — sacct rc 1,
"Slurm accounting storage is disabled" — is tested live at the end, with a job id no
JPU-Share run has.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jpushare.executors.base import ResolvesLostRuns, RunState
from jpushare.executors.slurm import SlurmExecutor
from jpushare.executors.slurm_commands import CommandResult, SlurmError
from jpushare.executors.slurm_parse import SACCT_FORMAT, parse_sacct
from tests.executors.live_slurm import require_cluster
from tests.executors.test_slurm_commands import ScriptedSlurm, make, ok

# Hand-written, in the documented format (see the module docstring).
SACCT_COMPLETED = (
    "812|COMPLETED|0:0|2026-11-30T22:52:38|2026-11-30T22:53:08|node-c|jps-42-2\n"
    "812.batch|COMPLETED|0:0|2026-11-30T22:52:38|2026-11-30T22:53:08|node-c|batch\n"
    "812.extern|COMPLETED|0:0|2026-11-30T22:52:38|2026-11-30T22:53:08|node-c|extern\n"
)
SACCT_FAILED = "813|FAILED|3:0|2026-11-30T22:52:38|2026-11-30T22:52:40|node-a|jps-42-2\n"
SACCT_CANCELLED = (
    "814|CANCELLED by 0|0:15|2026-11-30T22:52:38|2026-11-30T22:55:00|node-b|jps-42-2\n"
)
SACCT_NODE_FAIL = "815|NODE_FAIL|0:15|2026-11-30T22:52:38|2026-11-30T22:54:00|node-b|jps-42-2\n"
SACCT_PENDING = "816|PENDING|0:0|Unknown|Unknown|None assigned|jps-42-2\n"


def epoch(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_parse_sacct_reads_allocations_and_skips_their_steps() -> None:
    jobs = parse_sacct(SACCT_COMPLETED + SACCT_CANCELLED + SACCT_PENDING, UTC)
    assert [(j.slurm_id, j.state, j.name) for j in jobs] == [
        ("812", "COMPLETED", "jps-42-2"),
        ("814", "CANCELLED", "jps-42-2"),
        ("816", "PENDING", "jps-42-2"),
    ]
    done = jobs[0]
    assert done.started_at == epoch("2026-11-30T22:52:38")
    assert done.ended_at == epoch("2026-11-30T22:53:08")
    assert (done.nodes, done.exit) == ("node-c", jobs[0].exit)
    assert done.exit is not None and (done.exit.code, done.exit.signal) == (0, 0)
    assert jobs[1].exit is not None and jobs[1].exit.signal == 15
    pending = jobs[2]
    assert (pending.started_at, pending.ended_at, pending.nodes) == (None, None, None)


def test_parse_sacct_keeps_a_bar_in_the_job_name_and_ignores_junk() -> None:
    text = "\n".join(
        [
            "",
            "900|FAILED|1:0|2026-11-30T22:52:38|2026-11-30T22:52:40|node-d|odd|name",
            "not a row",
            "901_3|COMPLETED|0:0|2026-11-30T22:52:38|2026-11-30T22:52:40|node-d|array",
        ]
    )
    jobs = parse_sacct(text, UTC)
    assert [(j.slurm_id, j.name) for j in jobs] == [("900", "odd|name")]
    assert SACCT_FORMAT.endswith("JobName")  # the free-text field goes last


@pytest.mark.parametrize(
    ("answer", "state", "exit_code"),
    [
        (SACCT_COMPLETED, RunState.COMPLETED, 0),
        (SACCT_FAILED, RunState.FAILED, 3),
        (SACCT_CANCELLED, RunState.CANCELLED, 143),
        (SACCT_NODE_FAIL, RunState.NODE_FAIL, 143),
    ],
)
def test_a_lost_run_is_what_accounting_recorded(
    tmp_path: Path, answer: str, state: RunState, exit_code: int
) -> None:
    slurm = ScriptedSlurm({"sacct": ok(answer)})
    ex = make(tmp_path, slurm)
    slurm_id = answer.split("|", 1)[0]
    info = ex.lost_run("42", 2, slurm_id)
    assert (info.state, info.exit_code, info.executor_id) == (state, exit_code, slurm_id)
    assert info.started_at == epoch("2026-11-30T22:52:38") and info.ended_at is not None
    assert slurm.argv("sacct") == [["sacct", "-j", slurm_id, "-n", "-P", "-X", "-o", SACCT_FORMAT]]
    assert slurm.calls[0][2]["TZ"] == "UTC0"  # times read as UTC


def test_a_lost_run_with_a_cuda_oom_in_its_output_is_an_oom(tmp_path: Path) -> None:
    ex = make(tmp_path, ScriptedSlurm({"sacct": ok(SACCT_FAILED)}))
    ex.log_dir.mkdir(parents=True)
    ex.log_path("42", 2).write_text("torch.OutOfMemoryError: CUDA out of memory.\n")
    assert ex.lost_run("42", 2, "813").state is RunState.OOM


@pytest.mark.parametrize(
    "line",
    [
        "torch.OutOfMemoryError: CUDA out of memory. db_password=hunter2",
        "slurmstepd: error: Detected 1 oom-kill event in StepId=813.batch db_password=hunter2",
    ],
)
def test_an_oom_reason_is_a_fixed_sentence_never_the_jobs_output(tmp_path: Path, line: str) -> None:
    ex = make(tmp_path, ScriptedSlurm({"sacct": ok(SACCT_FAILED)}))
    ex.log_dir.mkdir(parents=True)
    ex.log_path("42", 2).write_text(line + "\n")
    info = ex.lost_run("42", 2, "813")
    assert info.state is RunState.OOM
    assert info.reason is not None and "out of memory" in info.reason
    assert "hunter2" not in info.reason and "db_password" not in info.reason


def test_accounting_disabled_means_failed_with_an_unknown_outcome(tmp_path: Path) -> None:
    disabled = CommandResult(1, "", "Slurm accounting storage is disabled\n")
    info = make(tmp_path, ScriptedSlurm({"sacct": disabled})).lost_run("42", 2, "812")
    assert info.state is RunState.FAILED
    assert (info.started_at, info.ended_at, info.exit_code) == (None, None, None)
    assert info.reason is not None
    assert "Slurm no longer knows job 812" in info.reason
    assert "accounting storage is disabled" in info.reason
    assert "outcome is unknown" in info.reason


def test_no_record_or_another_jobs_record_means_an_unknown_outcome(tmp_path: Path) -> None:
    # Job ids restart when a controller's state is wiped: 812 may now be someone else's.
    other = SACCT_COMPLETED.replace("jps-42-2", "jps-7-1")
    for answer in ("", other):
        info = make(tmp_path, ScriptedSlurm({"sacct": ok(answer)})).lost_run("42", 2, "812")
        assert info.state is RunState.FAILED
        assert info.reason is not None and "no record of jps-42-2" in info.reason


def test_no_sacct_binary_is_an_unknown_outcome_but_a_timeout_is_an_error(
    tmp_path: Path,
) -> None:
    def missing(argv: Sequence[str], stdin: str | None) -> CommandResult:
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    info = make(tmp_path, ScriptedSlurm({"sacct": missing})).lost_run("42", 2, "812")
    assert info.state is RunState.FAILED and "outcome is unknown" in (info.reason or "")

    def slow(argv: Sequence[str], stdin: str | None) -> CommandResult:
        import subprocess

        raise subprocess.TimeoutExpired(list(argv), 30)

    with pytest.raises(SlurmError, match="timed out"):
        make(tmp_path, ScriptedSlurm({"sacct": slow})).lost_run("42", 2, "812")


def test_the_slurm_executor_resolves_lost_runs(tmp_path: Path) -> None:
    assert isinstance(SlurmExecutor(tmp_path), ResolvesLostRuns)


@pytest.mark.slurm
def test_on_the_fake_cluster_sacct_is_disabled_and_the_outcome_is_unknown(
    tmp_path: Path,
) -> None:
    require_cluster()
    ex = SlurmExecutor(tmp_path, name_prefix="jptlost")
    info = ex.lost_run("1", 1, "999999")
    assert info.state is RunState.FAILED
    assert info.reason is not None
    assert "Slurm no longer knows job 999999" in info.reason
    assert "outcome is unknown" in info.reason
