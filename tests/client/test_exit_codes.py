"""`wait` and `submit --wait` exit as `sbatch --wait`: with the job's exit code, and with a
code of their own for a job that ended without one and for a wait that timed out; with
several jobs, the highest. Through the CLI against a real server on both databases."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jpushare import store
from jpushare.client.exit_codes import (
    EXIT_CANCELLED,
    EXIT_NO_EXIT_CODE,
    EXIT_OUT_OF_MEMORY,
    EXIT_TIME_LIMIT,
    EXIT_WAIT_TIMEOUT,
    job_exit_code,
    jobs_exit_code,
)
from jpushare.time_limits import time_limit_reason
from tests.client.test_cli_server import Served, cli, served  # noqa: F401 (the fixture)
from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401

ENDED: dict[str, tuple[dict[str, Any], int]] = {
    "completed: 0": ({"state": "COMPLETED", "exit_code": 0}, 0),
    "failed with exit 3: 3": ({"state": "FAILED", "exit_code": 3}, 3),
    "cancelled": ({"state": "CANCELLED", "exit_code": None}, EXIT_CANCELLED),
    "cancelled while running, killed by a signal": (
        {"state": "CANCELLED", "exit_code": 143},
        EXIT_CANCELLED,
    ),
    "time limit": (
        {"state": "FAILED", "exit_code": 0, "reason": time_limit_reason("TIMEOUT")},
        EXIT_TIME_LIMIT,
    ),
    "out of memory on the strongest tier": (
        {"state": "FAILED", "exit_code": 1, "reason": "CUDA out of memory (reported …)"},
        EXIT_OUT_OF_MEMORY,
    ),
    "failed without an exit code (node lost)": (
        {"state": "FAILED", "exit_code": None, "reason": "node-a went down"},
        EXIT_NO_EXIT_CODE,
    ),
    "an exit code out of range": ({"state": "FAILED", "exit_code": 300}, EXIT_NO_EXIT_CODE),
    "still running (wait --started)": ({"state": "RUNNING", "exit_code": None}, 0),
}


@pytest.mark.parametrize(("job", "want"), ENDED.values(), ids=ENDED.keys())
def test_each_way_a_job_ends_has_its_exit_code(job: dict[str, Any], want: int) -> None:
    assert job_exit_code(job) == want


def test_several_jobs_exit_with_the_highest_code() -> None:
    jobs = [{"state": "COMPLETED", "exit_code": 0}, {"state": "FAILED", "exit_code": 7}]
    assert jobs_exit_code(jobs) == 7
    assert jobs_exit_code([*jobs, {"state": "CANCELLED"}]) == EXIT_CANCELLED
    assert jobs_exit_code([]) == 0


def end(served: Served, job: int, state: store.JobState, **how: Any) -> None:  # noqa: F811
    with served.sessions.begin() as s:
        assert store.end_job(s, job, state, served.clock(), **how)


def submit(served: Served, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert cli(served, "alice", "submit", "--gpus", "1", "--", "true", capsys=capsys)[0] == 0


def test_wait_exits_with_the_jobs_exit_code_and_the_highest_of_several(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    for _ in range(3):
        submit(served, capsys)
    served.busy.clear()
    served.cycle()
    end(served, 1, store.JobState.COMPLETED, exit_code=0)
    end(served, 2, store.JobState.FAILED, exit_code=3)
    code, out, _ = cli(served, "alice", "wait", "1", capsys=capsys)
    assert code == 0 and "COMPLETED" in out
    code, out, _ = cli(served, "alice", "wait", "2", capsys=capsys)
    assert code == 3 and "FAILED" in out and "exit code 3" in out
    code, out, _ = cli(served, "alice", "wait", "1", "2", "--json", capsys=capsys)
    assert code == 3  # the answer is still printed whole for scripts
    assert [j["state"] for j in json.loads(out)["data"]] == ["COMPLETED", "FAILED"]

    code, _, err = cli(served, "alice", "wait", "3", "--timeout", "0.2", "--poll", "0.1",
                       capsys=capsys)  # fmt: skip
    assert code == EXIT_WAIT_TIMEOUT and err.startswith("error TIMEOUT:")
    assert cli(served, "alice", "cancel", "3", capsys=capsys)[0] == 0
    code, out, _ = cli(served, "alice", "wait", "1", "2", "3", capsys=capsys)
    assert code == EXIT_CANCELLED and "CANCELLED" in out.splitlines()[2]


def test_a_job_stopped_at_its_time_limit_exits_121(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    submit(served, capsys)
    served.busy.clear()
    served.cycle()
    end(served, 1, store.JobState.FAILED, reason=time_limit_reason("TIMEOUT"))
    code, out, _ = cli(served, "alice", "wait", "1", capsys=capsys)
    assert code == EXIT_TIME_LIMIT and "FAILED (time limit)" in out


def test_submit_wait_waits_for_the_end_and_stops_a_pipeline_after_a_failure(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`jpushare submit --wait … && next-step`: the next step runs only after a success."""
    served.busy.clear()
    exits = iter((0, 5))

    def the_cluster_runs_it(seconds: float) -> None:  # while the client sleeps between polls
        with served.sessions() as s:
            jobs = [j for j in store.list_jobs(s) if j.state == store.JobState.GLOBAL_QUEUE_WAIT]
        served.cycle()
        for job in jobs:
            code = next(exits)
            state = store.JobState.COMPLETED if code == 0 else store.JobState.FAILED
            end(served, job.id, state, exit_code=code)

    monkeypatch.setattr("jpushare.client.job_commands.time.sleep", the_cluster_runs_it)
    code, out, err = cli(served, "alice", "submit", "--gpus", "1", "--wait", "--", "true",
                         capsys=capsys)  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[1].startswith("job 1 (true): COMPLETED on node-")
    code, out, _ = cli(served, "alice", "submit", "--gpus", "1", "--wait", "--", "false",
                       capsys=capsys)  # fmt: skip
    assert code == 5 and "FAILED" in out.splitlines()[1] and "exit code 5" in out
