"""SlurmExecutor without a cluster: the commands it runs and how it reads captured answers.

A scripted runner stands in for subprocess (like httpx's MockTransport): each test says
what squeue/sinfo/sbatch/scancel answer, with output captured from the real cluster
(fixtures/slurm/), and checks the argv the executor sent. The same behaviour against the
real thing: test_slurm_executor.py and test_slurm_contract.py.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from jpushare.executors.base import LaunchSpec, NodeState, RunState, SubmitRefused
from jpushare.executors.slurm import SlurmExecutor
from jpushare.executors.slurm_commands import CommandResult, SlurmCommands, SlurmError

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


Answer = CommandResult | Callable[[Sequence[str], str | None], CommandResult]


@dataclass
class ScriptedSlurm:
    """A CommandRunner: answers by command name, records every call."""

    answers: dict[str, Answer] = field(default_factory=dict)
    calls: list[tuple[list[str], str | None, dict[str, str]]] = field(default_factory=list)

    def __call__(
        self, argv: Sequence[str], stdin: str | None, env: Mapping[str, str], timeout_s: float
    ) -> CommandResult:
        self.calls.append((list(argv), stdin, dict(env)))
        answer = self.answers[Path(argv[0]).name]
        return answer(argv, stdin) if callable(answer) else answer

    def argv(self, command: str) -> list[list[str]]:
        return [argv for argv, _, _ in self.calls if Path(argv[0]).name == command]


def ok(stdout: str = "") -> CommandResult:
    return CommandResult(0, stdout, "")


def spec(**changes: object) -> LaunchSpec:
    base: dict[str, object] = dict(
        job_id="42",
        attempt=2,
        name="train resnet",
        command="python train.py --lr 3e-4",
        node="node-c",
        gpu_type="rtx5090",
        num_gpus=2,
        partition="gpu",
    )
    base.update(changes)
    return LaunchSpec(**base)  # type: ignore[arg-type]


def make(tmp_path: Path, slurm: ScriptedSlurm, **kwargs: object) -> SlurmExecutor:
    """An executor on the scripted runner; no backfill partition unless a test names one
    (test_slurm_backfill.py: the squeue of the backfill jobs around sinfo)."""
    kwargs.setdefault("backfill_partition", None)
    return SlurmExecutor(tmp_path / "logs", runner=slurm, **kwargs)  # type: ignore[arg-type]


def test_submit_pins_the_placement_and_names_the_run(tmp_path: Path) -> None:
    slurm = ScriptedSlurm({"squeue": ok(), "sbatch": ok("77\n")})
    ex = make(tmp_path, slurm, sbatch_args=("--account=lab1",))

    assert ex.submit(spec(time_limit_s=90)) == "77"

    (argv,) = slurm.argv("sbatch")
    assert argv[1:] == [
        "--parsable",
        "--job-name=jps-42-2",
        "--comment=jpushare job=42 attempt=2",
        "--nodelist=node-c",
        "--nodes=1",
        "--ntasks=1",
        "--gres=gpu:rtx5090:2",
        f"--output={tmp_path / 'logs' / 'jps-42-2.out'}",
        "--no-requeue",
        "--partition=gpu",
        "--time=2",  # 90 s -> whole minutes, rounded up
        "--account=lab1",
    ]
    script = next(stdin for a, stdin, _ in slurm.calls if a == argv)
    assert script is not None
    assert script.startswith("#!/bin/bash\n")
    assert "export JPUSHARE_JOB_ID=42\n" in script and "export JPUSHARE_ATTEMPT=2\n" in script
    assert "export JPUSHARE_JOB_NAME='train resnet'\n" in script
    assert script.endswith("python train.py --lr 3e-4\n")
    assert (tmp_path / "logs").is_dir()


def test_submit_looks_the_name_up_first_and_returns_an_existing_run(tmp_path: Path) -> None:
    t = "2026-11-30T22:55:58"
    line = f"31|RUNNING|None|node-c|gpu|{t}|{t}|NONE|0|gres:gpu:rtx5090:2|root|jps-42-2"
    slurm = ScriptedSlurm({"squeue": ok(line + "\n")})
    ex = make(tmp_path, slurm)

    assert ex.submit(spec()) == "31"

    assert slurm.argv("sbatch") == []
    (squeue,) = slurm.argv("squeue")
    assert "--name=jps-42-2" in squeue and squeue[squeue.index("-t") + 1] == "all"


def test_a_run_sbatch_refused_before_is_not_taken_for_an_existing_one(tmp_path: Path) -> None:
    t = "2026-11-30T22:55:58"
    ghost = f"12|FAILED|BadConstraints||gpu|{t}|{t}|{t}|1|gres:gpu:nosuch:1|root|jps-42-2"
    slurm = ScriptedSlurm({"squeue": ok(ghost + "\n"), "sbatch": ok("13\n")})

    assert make(tmp_path, slurm).submit(spec()) == "13"


def test_a_refusal_is_submit_refused_with_sbatchs_sentence(tmp_path: Path) -> None:
    slurm = ScriptedSlurm(
        {"squeue": ok(), "sbatch": CommandResult(1, "", fixture("sbatch-refused-gres-type.txt"))}
    )

    with pytest.raises(SubmitRefused) as refused:
        make(tmp_path, slurm).submit(spec())

    assert (
        str(refused.value) == "Slurm refused the job: Requested node configuration is not available"
    )


def test_a_controller_that_does_not_answer_is_not_a_refusal(tmp_path: Path) -> None:
    down = (
        "sbatch: error: Batch job submission failed: "
        "Unable to contact slurm controller (connect failure)\n"
    )
    slurm = ScriptedSlurm({"squeue": ok(), "sbatch": CommandResult(1, "", down)})

    with pytest.raises(SlurmError):
        make(tmp_path, slurm).submit(spec())


def test_a_command_that_hangs_is_a_slurm_error(tmp_path: Path) -> None:
    def hang(argv: Sequence[str], stdin: str | None) -> CommandResult:
        raise subprocess.TimeoutExpired(list(argv), 30)

    with pytest.raises(SlurmError, match="timed out"):
        make(tmp_path, ScriptedSlurm({"sinfo": hang})).inventory()


def test_a_tier_name_is_mapped_to_its_gres_type(tmp_path: Path) -> None:
    slurm = ScriptedSlurm({"squeue": ok(), "sbatch": ok("5\n")})
    ex = make(tmp_path, slurm, gpu_type_to_tier={"rtx5090": "blackwell"})

    ex.submit(spec(gpu_type="blackwell"))
    ex.submit(spec(job_id="43", gpu_type="rtx5090"))  # a GRES type passes through

    assert [a[7] for a in slurm.argv("sbatch")] == ["--gres=gpu:rtx5090:2", "--gres=gpu:rtx5090:2"]
    with pytest.raises(ValueError, match="two GRES types"):
        make(tmp_path, slurm, gpu_type_to_tier={"a": "t", "b": "t"})


def test_a_job_id_that_cannot_be_a_slurm_name_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        make(tmp_path, ScriptedSlurm()).submit(spec(job_id="a b"))


def test_inventory_reads_gres_minus_gres_used_per_node_and_type(tmp_path: Path) -> None:
    slurm = ScriptedSlurm({"sinfo": ok(fixture("sinfo-busy.txt"))})

    groups = make(tmp_path, slurm).inventory()

    assert [(g.node, g.gpu_type, g.total, g.used, g.state, g.partitions) for g in groups] == [
        ("node-a", "rtx4090", 2, 2, NodeState.UP, ("gpu",)),
        ("node-b", "rtx5090", 4, 1, NodeState.DRAIN, ("gpu",)),
        ("node-c", "rtx4090", 4, 1, NodeState.UP, ("gpu",)),
        ("node-c", "rtx5090", 4, 2, NodeState.UP, ("gpu",)),  # the foreign job's
        ("node-d", "rtx3080ti", 2, 0, NodeState.DOWN, ("gpu", "legacy")),
    ]


def test_runs_map_every_captured_end_and_skip_foreign_and_refused_jobs(tmp_path: Path) -> None:
    slurm = ScriptedSlurm({"squeue": ok(fixture("squeue-ended.txt"))})
    ex = make(tmp_path, slurm)
    ex.log_dir.mkdir()
    (ex.log_dir / "jps-cap-cudaoom-1.out").write_text(fixture("log-cudaoom.out"))

    runs = {r.job_id: r for r in ex.runs()}

    assert {job_id: r.state for job_id, r in runs.items()} == {
        "cap-plain": RunState.COMPLETED,
        "cap-parsable": RunState.COMPLETED,
        "cap-completed": RunState.COMPLETED,
        "cap-exit3": RunState.FAILED,
        "cap-killed": RunState.FAILED,
        "cap-cudaoom": RunState.OOM,  # FAILED to Slurm, OOM by its output
        "cap-oom": RunState.OOM,
        "cap-timeout": RunState.TIMEOUT,
        "cap-cancelled": RunState.CANCELLED,
        "cap-pending": RunState.CANCELLED,
        "cap-nodefail": RunState.NODE_FAIL,
        "cap-running": RunState.RUNNING,
        "cap-mixed": RunState.RUNNING,
        "cap-requeued": RunState.PENDING,
    }
    assert runs["cap-exit3"].exit_code == 3
    assert runs["cap-killed"].exit_code == 137
    assert runs["cap-killed"].reason == "Slurm FAILED (JobLaunchFailure), killed by signal 9"
    assert "CUDA out of memory" in (runs["cap-cudaoom"].reason or "")
    assert runs["cap-running"].started_at is not None and runs["cap-running"].ended_at is None
    assert runs["cap-running"].exit_code is None
    assert runs["cap-pending"].started_at is None  # never ran
    assert runs["cap-requeued"].started_at is None  # squeue printed an estimate
    timeout = runs["cap-timeout"]
    assert timeout.started_at is not None and timeout.ended_at is not None
    assert timeout.ended_at - timeout.started_at == 61


def test_cancel_is_idempotent_but_reports_real_failures(tmp_path: Path) -> None:
    gone = "scancel: error: Kill job error on job id 5: Job/step already completing or completed\n"
    slurm = ScriptedSlurm({"scancel": CommandResult(1, "", gone)})
    ex = make(tmp_path, slurm)

    ex.cancel("5")

    slurm.answers["scancel"] = CommandResult(1, "", "scancel: error: Access/permission denied\n")
    with pytest.raises(SlurmError, match="permission"):
        ex.cancel("5")


def test_commands_run_in_utc_with_standard_times_and_without_service_secrets(
    tmp_path: Path,
) -> None:
    slurm = ScriptedSlurm({"sinfo": ok()})
    env = {"PATH": "/usr/bin", "TZ": "Asia/Seoul", "JPUSHARE_DATABASE_URL": "postgresql://secret"}
    ex = make(tmp_path, slurm, env=env, commands=SlurmCommands(sinfo="/opt/slurm/bin/sinfo"))

    ex.inventory()

    slurm.answers.update(squeue=ok(), sbatch=ok("1\n"))
    ex.submit(spec())

    (sinfo, squeue, sbatch) = slurm.calls
    assert sinfo[0][0] == "/opt/slurm/bin/sinfo"
    assert (
        sinfo[2] == squeue[2] == {"PATH": "/usr/bin", "TZ": "UTC0", "SLURM_TIME_FORMAT": "standard"}
    )
    # sbatch's environment is the job's: its own time zone, still no service secrets
    assert sbatch[2] == {"PATH": "/usr/bin", "TZ": "Asia/Seoul"}


def test_the_log_is_the_runs_output_file(tmp_path: Path) -> None:
    ex = make(tmp_path, ScriptedSlurm())
    assert ex.log("42", 2) == ""
    ex.log_dir.mkdir()
    ex.log_path("42", 2).write_text("hello\n")
    assert ex.log("42", 2) == "hello\n"


def test_a_job_with_a_directory_gets_its_files_environment_and_resources(
    tmp_path: Path,
) -> None:
    slurm = ScriptedSlurm({"squeue": ok(), "sbatch": ok("78\n")})
    ex = make(tmp_path, slurm, submit_as_user=False, env={"JPUSHARE_DATABASE_URL": "x"})
    wd = tmp_path / "proj"
    wd.mkdir()
    ex.submit(
        spec(
            workdir=str(wd),
            environment={"MYVAR": "1", "SBATCH_QOS": "high", "SLURM_JOB_ID": "9"},
            output="run-%j.%a-%u.log",
            error="/abs/e%%-%j.txt",
            cpus_per_gpu=6,
            mem_per_gpu_mb=16384,
        )
    )
    (argv,) = slurm.argv("sbatch")
    assert f"--chdir={wd}" in argv
    # %j and %a are ours (Slurm's %j is its own id); every other % is escaped for sbatch.
    assert f"--output={wd}/run-42.2-%%u.log" in argv
    assert "--error=/abs/e%%-42.txt" in argv
    assert "--open-mode=append" in argv
    assert "--cpus-per-gpu=6" in argv and "--mem-per-gpu=16384M" in argv
    assert not any(a.startswith("--uid") for a in argv)
    _, script, env = slurm.calls[-1]
    assert script is not None
    # The job's variables travel in the script; sbatch's own environment is the service's
    # PATH/SLURM_CONF and the umask (tests/security/test_slurm_submission.py).
    assert "export MYVAR=1\n" in script and env["SLURM_UMASK"] == "0077"
    assert "MYVAR" not in env
    assert "SBATCH_QOS" not in script + str(env) and "SLURM_JOB_ID" not in script + str(env)
    assert "JPUSHARE_DATABASE_URL" not in script + str(env)
    assert all(f"export {k}=" in script for k in ("HOME", "USER", "LOGNAME", "SHELL"))


def test_as_root_the_owners_uid_and_gid_go_to_sbatch(tmp_path: Path) -> None:
    slurm = ScriptedSlurm({"squeue": ok(), "sbatch": ok("79\n")})
    ex = make(tmp_path, slurm, submit_as_user=True)
    ex.submit(spec(unix_user="root", workdir="/", environment={}))
    (argv,) = slurm.argv("sbatch")
    assert "--uid=0" in argv and "--gid=0" in argv
    with pytest.raises(SubmitRefused, match="no Unix account"):
        ex.submit(spec(job_id="43", unix_user="jpst-no-such-user", workdir="/"))
    assert len(slurm.argv("sbatch")) == 1


def test_a_missing_directory_is_refused_before_sbatch(tmp_path: Path) -> None:
    slurm = ScriptedSlurm({"squeue": ok(), "sbatch": ok("80\n")})
    ex = make(tmp_path, slurm, submit_as_user=False)
    with pytest.raises(SubmitRefused, match="No such file or directory"):
        ex.submit(spec(workdir=str(tmp_path / "nope"), environment={}))
    assert slurm.argv("sbatch") == []


def test_inventory_names_gpus_by_tier_through_the_executors_own_mapping(tmp_path: Path) -> None:
    slurm = ScriptedSlurm({"sinfo": ok(fixture("sinfo-busy.txt"))})

    groups = make(tmp_path, slurm, gpu_type_to_tier={"rtx5090": "blackwell"}).inventory()

    assert [(g.node, g.gpu_type) for g in groups] == [
        ("node-a", "rtx4090"),
        ("node-b", "blackwell"),
        ("node-c", "rtx4090"),
        ("node-c", "blackwell"),
        ("node-d", "rtx3080ti"),
    ]
