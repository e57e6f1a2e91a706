"""The JPUSHARE_SLURM_* settings: parsing, errors, how `serve` builds the executor and the
dispatcher's GPU type -> tier mapping from them, and its start-up check that no other
database's runs carry our job-name prefix (no cluster needed: a scripted squeue)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.config import ConfigError, load_settings, parse_gpu_types
from jpushare.executors.base import RunInfo
from jpushare.executors.slurm import SlurmExecutor
from jpushare.executors.slurm_commands import CommandResult
from jpushare.formats.cluster_file import load_cluster
from jpushare.service.serve import build_executor, check_foreign_runs
from jpushare.store.cluster_setup import load_cluster_spec
from jpushare.store.schema import Job
from tests.executors.test_slurm_commands import ScriptedSlurm, ok

REPO = Path(__file__).resolve().parents[2]


def test_defaults() -> None:
    s = load_settings({"JPUSHARE_STATE_DIR": "/srv/jps"})
    assert s.slurm_log_dir is None
    assert s.slurm_logs == Path("/srv/jps/slurm-logs")
    assert dict(s.slurm_gpu_types) == {}
    assert s.slurm_sbatch_args == ()
    assert s.slurm_prefix == "jps"


def test_every_slurm_setting() -> None:
    s = load_settings(
        {
            "JPUSHARE_EXECUTOR": "slurm",
            "JPUSHARE_SLURM_LOG_DIR": "/shared/jps-logs",
            "JPUSHARE_SLURM_GPU_TYPES": " geforce_rtx_4090=rtx4090, a100=a100-80g ,",
            "JPUSHARE_SLURM_SBATCH_ARGS": "--account=lab --comment='two words' --mem-per-gpu=16G",
            "JPUSHARE_SLURM_PREFIX": "jps_prod",
        }
    )
    assert s.slurm_logs == Path("/shared/jps-logs")
    assert dict(s.slurm_gpu_types) == {"geforce_rtx_4090": "rtx4090", "a100": "a100-80g"}
    assert s.slurm_sbatch_args == ("--account=lab", "--comment=two words", "--mem-per-gpu=16G")
    assert s.slurm_prefix == "jps_prod"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a100", "is not GRES_TYPE=TIER"),
        ("a100=", "is not GRES_TYPE=TIER"),
        ("a 100=x", "is not GRES_TYPE=TIER"),
        ("a100=x,a100=y", "mapped twice"),
        ("a100=x,h100=x", "mapped from two GRES types"),
    ],
)
def test_bad_gpu_types_are_refused_with_the_setting_named(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_gpu_types(text)
    assert "JPUSHARE_SLURM_GPU_TYPES" in str(info.value)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"JPUSHARE_SLURM_PREFIX": "jps-prod"}, "JPUSHARE_SLURM_PREFIX"),
        ({"JPUSHARE_SLURM_PREFIX": "1jps"}, "JPUSHARE_SLURM_PREFIX"),
        ({"JPUSHARE_SLURM_SBATCH_ARGS": "--comment='unclosed"}, "JPUSHARE_SLURM_SBATCH_ARGS"),
    ],
)
def test_bad_values_are_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(env)


def test_serve_builds_the_slurm_executor_and_the_same_mapping_for_the_dispatcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_runs(self: SlurmExecutor) -> list[RunInfo]:
        return []

    monkeypatch.setattr(SlurmExecutor, "runs", no_runs)  # the prefix check: nothing there
    s = load_settings(
        {
            "JPUSHARE_STATE_DIR": str(tmp_path),
            "JPUSHARE_EXECUTOR": "slurm",
            "JPUSHARE_SLURM_GPU_TYPES": "geforce_rtx_4090=rtx4090",
            "JPUSHARE_SLURM_SBATCH_ARGS": "--account=lab",
            "JPUSHARE_SLURM_PREFIX": "jpx",
        }
    )
    executor = build_executor(s, None, None)  # type: ignore[arg-type]  # unused for slurm
    assert isinstance(executor, SlurmExecutor)
    assert executor.log_dir == tmp_path / "slurm-logs"
    assert executor.name_prefix == "jpx"
    assert executor.sbatch_args == ("--account=lab",)
    assert executor.gres_type("rtx4090") == "geforce_rtx_4090"
    assert executor.tier_of("geforce_rtx_4090") == "rtx4090"


def squeue_row(slurm_id: int, name: str) -> str:
    return (
        f"{slurm_id}|COMPLETED|None|node-a|gpu|2026-11-30T22:55:58|2026-11-30T22:55:58|"
        f"2026-11-30T22:56:08|0|gres:gpu:rtx4090:1|root|{name}\n"
    )


@pytest.fixture
def sessions(tmp_path: Path) -> sessionmaker[Session]:
    url = store.sqlite_url(tmp_path / "db.sqlite")
    store.upgrade(url)
    factory = store.make_sessionmaker(store.make_engine(url))
    now = store.utc_now()
    with factory.begin() as s:
        load_cluster_spec(s, load_cluster(REPO / "examples" / "slurm-cluster.yaml"), now)
        user = store.create_user(s, "alice", "NLP", "student", now)
        store.submit(s, user_id=user.id, name="one", command="true", num_gpus=1, now=now)
    return factory


def test_a_database_refuses_another_databases_runs_with_its_prefix(
    tmp_path: Path, sessions: sessionmaker[Session]
) -> None:
    # Job 1 is this database's (dispatched once); job 7 is not: a wiped database's run,
    # still in squeue. `x-9-1` has another prefix; `jps-cap-1` cannot collide (job ids are
    # numbers).
    with sessions.begin() as s:
        s.execute(update(Job).where(Job.id == 1).values(attempts=1))
    squeue = ok(
        squeue_row(40, "jps-1-1")
        + squeue_row(41, "jps-7-1")
        + squeue_row(42, "x-9-1")
        + squeue_row(43, "jps-cap-1")
    )
    ex = SlurmExecutor(tmp_path, runner=ScriptedSlurm({"squeue": squeue}))
    with pytest.raises(ConfigError, match=r"1 job\(s\) named jps-\* .*e\.g\. jps-7-1"):
        check_foreign_runs(ex, sessions)
    ours = SlurmExecutor(tmp_path, runner=ScriptedSlurm({"squeue": ok(squeue_row(40, "jps-1-1"))}))
    check_foreign_runs(ours, sessions)  # its own run: fine
    # An attempt job 1 has not reached yet is another database's run too.
    ahead = SlurmExecutor(tmp_path, runner=ScriptedSlurm({"squeue": ok(squeue_row(44, "jps-1-2"))}))
    with pytest.raises(ConfigError, match=r"e\.g\. jps-1-2"):
        check_foreign_runs(ahead, sessions)


def test_the_prefix_check_is_skipped_when_slurm_does_not_answer(
    tmp_path: Path, sessions: sessionmaker[Session]
) -> None:
    down = CommandResult(1, "", "slurm_load_jobs error: Unable to contact slurm controller")
    check_foreign_runs(SlurmExecutor(tmp_path, runner=ScriptedSlurm({"squeue": down})), sessions)


@pytest.mark.parametrize(("text", "want"), [("", None), ("yes", True), ("NO", False), ("1", True)])
def test_submitting_as_the_owner_is_a_setting_defaulting_to_root(
    text: str, want: bool | None
) -> None:
    s = load_settings({"JPUSHARE_SLURM_SUBMIT_AS_USER": text})
    assert s.slurm_submit_as_user is want
    with pytest.raises(ConfigError, match="JPUSHARE_SLURM_SUBMIT_AS_USER"):
        load_settings({"JPUSHARE_SLURM_SUBMIT_AS_USER": "maybe"})
