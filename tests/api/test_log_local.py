"""The log and cancel endpoints with the real LocalExecutor: a real process, its real log."""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.executors.base import LaunchSpec, RunInfo, RunState
from jpushare.executors.gpus import LocalGpu
from jpushare.executors.local import LocalExecutor
from jpushare.run_settings import JobRun
from jpushare.store.schema import User
from tests.api.conftest import ALL_BUSY, ApiWorld, make_world
from tests.api.test_errors import error


@pytest.fixture
def executor(tmp_path: Path) -> LocalExecutor:
    gpus = [LocalGpu("node-b", i, "rtx4090") for i in range(4)]
    return LocalExecutor(tmp_path / "local", gpus=gpus, cancel_grace_s=2.0)


@pytest.fixture
def local(sessions: sessionmaker[Session], executor: LocalExecutor) -> Iterator[ApiWorld]:
    yield from make_world(sessions, executor)


def start(api: ApiWorld, executor: LocalExecutor, user: str, command: str) -> int:
    """A job without a working directory (one from before they were required: the API
    takes none without), dispatched onto node-b and started locally: its log is the
    executor's."""
    api.busy.update(ALL_BUSY)
    api.busy[("node-b", "rtx4090")] = 0
    with api.sessions.begin() as s:
        job = store.submit(
            s, user_id=api.users[user].id, name="t", command=command, num_gpus=1, now=api.clock()
        ).job.id
    _, recorded = api.cycle()
    (d,) = recorded.dispatched
    assert (d.node, d.tier) == ("node-b", "rtx4090")
    run_id = executor.submit(
        LaunchSpec(str(job), d.attempt, d.name, d.command, d.node, d.tier, d.num_gpus)
    )
    with api.sessions.begin() as s:
        store.confirm_dispatch(s, job, run_id, api.clock(), attempt=d.attempt)
    return job


def wait_for(executor: LocalExecutor, job: int, ended: bool, timeout_s: float = 20) -> RunInfo:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = executor.find(str(job), 1)
        if info is not None and (info.state.ended if ended else info.state is RunState.RUNNING):
            return info
        time.sleep(0.05)
    raise AssertionError(f"job {job}: not {'ended' if ended else 'running'} in {timeout_s}s")


def test_the_log_is_the_runs_output(local: ApiWorld, executor: LocalExecutor) -> None:
    job = start(local, executor, "alice", "echo hello from $JPUSHARE_JOB_ID; echo oops >&2")
    assert wait_for(executor, job, ended=True).state is RunState.COMPLETED
    r = local.get(f"/v1/jobs/{job}/log", "alice")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["job_id"] == job and body["attempt"] == 1
    assert f"hello from {job}" in body["log"] and "oops" in body["log"]
    assert local.get(f"/v1/jobs/{job}/log", "pia").status_code == 200
    error(local.get(f"/v1/jobs/{job}/log", "bob"), 403, "FORBIDDEN")
    error(local.get(f"/v1/jobs/{job}/log", "alice", params={"attempt": 2}), 404, "NOT_FOUND")


def test_a_queued_job_has_an_empty_log(local: ApiWorld) -> None:
    local.busy.update(ALL_BUSY)
    job = local.submit("alice", 1)
    body = local.get(f"/v1/jobs/{job}/log").json()
    assert (body["job_id"], body["attempt"], body["log"]) == (job, 0, "")
    assert body["state"] == "GLOBAL_QUEUE_WAIT"


def test_cancel_stops_the_running_process(local: ApiWorld, executor: LocalExecutor) -> None:
    job = start(local, executor, "bob", "echo started; sleep 60")
    wait_for(executor, job, ended=False)
    # RUNNING is the wrapper's process group; the command itself starts a moment later.
    deadline = time.monotonic() + 20
    while "started" not in executor.log(str(job), 1):
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    r = local.post(f"/v1/jobs/{job}/cancel", "bob")
    assert r.status_code == 200 and r.json()["state"] == "CANCELLED"
    assert wait_for(executor, job, ended=True).state is RunState.CANCELLED
    assert "started" in local.get(f"/v1/jobs/{job}/log", "bob").json()["log"]


def test_without_an_executor_the_log_is_503(api: ApiWorld) -> None:
    with api.sessions.begin() as s:  # a job from before working directories were required
        job = store.submit(
            s, user_id=api.users["alice"].id, name="t", command="true", num_gpus=1, now=api.clock()
        ).job.id
    api.cycle()
    error(api.get(f"/v1/jobs/{job}/log"), 503, "UNAVAILABLE")


def test_a_jobs_own_files_are_read_with_stderr_and_offset(
    local: ApiWorld, executor: LocalExecutor, tmp_path: Path
) -> None:
    me = pwd.getpwuid(os.geteuid()).pw_name  # under root the files are read as this account
    with local.sessions.begin() as s:
        s.execute(update(User).where(User.name == "alice").values(unix_user=me))
    wd = tmp_path / "proj"
    wd.mkdir()
    local.busy.update(ALL_BUSY)
    local.busy[("node-b", "rtx4090")] = 0
    body = {
        "name": "t",
        "command": "echo out-1; echo err-1 >&2; echo out-2",
        "num_gpus": 1,
        "workdir": str(wd),
        "environment": {"PATH": "/usr/bin:/bin"},
        "error_path": "e-%j-%a.txt",
    }
    r = local.post("/v1/jobs", "alice", json=body)
    assert r.status_code == 201, r.text
    job = int(r.json()["id"])
    assert (r.json()["workdir"], r.json()["error_path"]) == (str(wd), "e-%j-%a.txt")
    _, recorded = local.cycle()
    (d,) = recorded.dispatched
    assert (d.workdir, d.error_path, d.unix_user) == (str(wd), "e-%j-%a.txt", me)
    executor.submit(
        LaunchSpec(
            str(job), d.attempt, d.name, d.command, d.node, d.tier, d.num_gpus,
            unix_user=d.unix_user, workdir=d.workdir, environment=d.environment,
            output=d.output_path, error=d.error_path,
        )
    )  # fmt: skip
    assert wait_for(executor, job, ended=True).state is RunState.COMPLETED

    out = local.get(f"/v1/jobs/{job}/log", "alice").json()
    assert out["log"] == "out-1\nout-2\n"
    assert out["path"] == str(wd / f"jpushare-{job}.out")
    assert (out["offset"], out["next_offset"]) == (0, len("out-1\nout-2\n"))
    err = local.get(f"/v1/jobs/{job}/log", "alice", params={"stderr": "true"}).json()
    assert (err["stream"], err["log"], err["path"]) == (
        "error",
        "err-1\n",
        str(wd / f"e-{job}-1.txt"),
    )
    rest = local.get(f"/v1/jobs/{job}/log", "alice", params={"offset": 6}).json()
    assert (rest["log"], rest["offset"]) == ("out-2\n", 6)
    error(local.get(f"/v1/jobs/{job}/log", "bob"), 403, "FORBIDDEN")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("workdir", "relative/dir"),
        ("workdir", "/with\x00nul"),
        ("environment", {"1BAD": "x"}),
        ("environment", {"A-B": "x"}),
        ("environment", {"OK": "nul\x00here"}),
        ("environment", {f"V{i}": "x" * 1000 for i in range(600)}),
        ("cpus_per_gpu", 0),
        ("mem_per_gpu_mb", 1),
        ("output_path", "dir/"),
    ],
)
def test_bad_run_settings_are_422_with_a_code(local: ApiWorld, field: str, value: object) -> None:
    body: dict[str, object] = {"command": "true", "num_gpus": 1, "workdir": "/tmp", field: value}
    error(local.post("/v1/jobs", "alice", json=body), 422, "VALIDATION_ERROR")


def test_an_environment_without_a_working_directory_is_422(local: ApiWorld) -> None:
    body = {"command": "true", "num_gpus": 1, "environment": {"A": "b"}}
    e = error(local.post("/v1/jobs", "alice", json=body), 422, "VALIDATION_ERROR")
    assert [err["loc"] for err in e["details"]["errors"]] == [["body", "workdir"]]
    with local.sessions.begin() as s:
        run = JobRun(environment={"A": "b"})
        with pytest.raises(store.InvalidRequest, match="working directory"):
            store.submit(s, user_id=1, name="", command="x", num_gpus=1, now=local.clock(), run=run)
