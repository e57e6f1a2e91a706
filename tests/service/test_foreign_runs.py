"""`serve` refuses to start over a local executor state directory that another database
used: its runs are named `<job id>.<attempt>`, and a database wiped and created again would
let its new job 1 adopt the old run of job 1 (ended at once with the old result)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.config import ConfigError, load_settings
from jpushare.executors.base import LaunchSpec, RunState
from jpushare.executors.gpus import LocalGpu
from jpushare.executors.local import LocalExecutor
from jpushare.formats.cluster_file import parse_cluster
from jpushare.service.serve import build_executor, check_foreign_runs
from jpushare.store.cluster_setup import load_cluster_spec
from tests.executors.contract import wait_for

CLUSTER_YAML = """
tiers:
  - {name: rtx4090, tflops: 82.6, sort_order: 20}
nodes:
  - {name: ws1, gpus: {rtx4090: 2}}
labs: {alpha: 0}
"""
GPUS = [LocalGpu("ws1", 0, "rtx4090"), LocalGpu("ws1", 1, "rtx4090")]


def old_run(state_dir: Path, job_id: str, attempt: int = 1) -> None:
    """A run another database's dispatcher started, ended, left in `state_dir`."""
    ex = LocalExecutor(state_dir, gpus=GPUS)
    ex.submit(LaunchSpec(job_id, attempt, "old", "echo old", "ws1", "rtx4090", 1))

    def ended() -> bool | None:
        info = ex.find(job_id, attempt)
        return True if info is not None and info.state.ended else None

    wait_for(ended, 10.0, what="the old run to end")
    info = ex.find(job_id, attempt)
    assert info is not None and info.state is RunState.COMPLETED


def new_database(sessions: sessionmaker[Session]) -> int:
    """The cluster and one queued job (job 1, attempts 0): a freshly created database."""
    now = store.utc_now()
    with sessions.begin() as s:
        load_cluster_spec(s, parse_cluster(CLUSTER_YAML), now)
        user = store.create_user(s, "alice", "alpha", "student", now)
        job = store.submit(s, user_id=user.id, name="new", command="true", num_gpus=1, now=now).job
    return job.id


def test_runs_of_another_database_in_the_state_dir_are_refused(
    tmp_path: Path, sessions: sessionmaker[Session]
) -> None:
    job_id = new_database(sessions)
    executor_dir = tmp_path / "executor"
    check_foreign_runs(LocalExecutor(executor_dir, gpus=GPUS), sessions)  # empty: fine
    # The old database's job 1 ran once: this database's job 1 has not been dispatched yet
    # (attempts 0), so attempt 1 is not its run.
    old_run(executor_dir, str(job_id))
    with pytest.raises(ConfigError, match=rf"{executor_dir}.*job {job_id} attempt 1.*Move"):
        check_foreign_runs(LocalExecutor(executor_dir, gpus=GPUS), sessions)


def test_a_run_of_a_job_id_this_database_lacks_is_refused(
    tmp_path: Path, sessions: sessionmaker[Session]
) -> None:
    new_database(sessions)
    old_run(tmp_path / "executor", "7")
    with pytest.raises(ConfigError, match=r"1 run\(s\).*job 7 attempt 1"):
        check_foreign_runs(LocalExecutor(tmp_path / "executor", gpus=GPUS), sessions)


def test_serve_builds_no_local_executor_over_another_databases_runs(
    tmp_path: Path, sessions: sessionmaker[Session]
) -> None:
    new_database(sessions)
    settings = load_settings({"JPUSHARE_STATE_DIR": str(tmp_path)})
    build_executor(settings, sessions, None)  # nothing there yet: fine
    old_run(tmp_path / "executor", "7")
    with pytest.raises(ConfigError, match=str(tmp_path / "executor")):
        build_executor(settings, sessions, None)


def test_jpushare_serve_exits_2_naming_the_state_dir(tmp_path: Path, db_url: str) -> None:
    engine = store.make_engine(db_url)
    try:
        new_database(store.make_sessionmaker(engine))
    finally:
        engine.dispose()
    old_run(tmp_path / "executor", "1")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JPUSHARE_")} | {
        "JPUSHARE_STATE_DIR": str(tmp_path),
        "JPUSHARE_DATABASE_URL": db_url,
        "JPUSHARE_PORT": "0",
    }
    done = subprocess.run(
        [sys.executable, "-m", "jpushare.service", "serve", "--no-dispatcher"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert f"{tmp_path / 'executor'}" in done.stderr
    assert "job 1 attempt 1" in done.stderr
