"""The log and cancel endpoints with the real LocalExecutor: a real process, its real log."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.executors.base import LaunchSpec, RunInfo, RunState
from jpushare.executors.gpus import LocalGpu
from jpushare.executors.local import LocalExecutor
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
    """Submit through the API, record a dispatch onto node-b, start it locally."""
    api.busy.update(ALL_BUSY)
    api.busy[("node-b", "rtx4090")] = 0
    r = api.post("/v1/jobs", user, json={"name": "t", "command": command, "num_gpus": 1})
    job = int(r.json()["id"])
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
    r = local.post(f"/v1/jobs/{job}/cancel", "bob")
    assert r.status_code == 200 and r.json()["state"] == "CANCELLED"
    assert wait_for(executor, job, ended=True).state is RunState.CANCELLED
    assert "started" in local.get(f"/v1/jobs/{job}/log", "bob").json()["log"]


def test_without_an_executor_the_log_is_503(api: ApiWorld) -> None:
    job = api.submit("alice", 1)
    api.cycle()
    error(api.get(f"/v1/jobs/{job}/log"), 503, "UNAVAILABLE")
