"""Through the CLI against a real server on both databases: `show`, `jobs` (elapsed, time
left, CSV, window), `cancel` of several jobs, `wait`, `submit --wait-started`, `labs` (rank, share,
in flight), and QUEUED where the API says GLOBAL_QUEUE_WAIT."""

from __future__ import annotations

import csv
import io
import json

import pytest

from jpushare import store
from jpushare.client.formatting import amount
from jpushare.client.job_commands import CSV_COLUMNS
from tests.client.test_cli_server import Served, cli, served  # noqa: F401 (the fixture)
from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401


@pytest.fixture(autouse=True)
def client_clock(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The CLI's clock is the server's (elapsed and time left are computed client-side)."""
    monkeypatch.setattr("jpushare.client.cli.now", served.clock)


def start(served: Served, job: int) -> None:  # noqa: F811
    """Dispatch the queue and mark `job` running at the clock's time."""
    served.busy.clear()
    served.cycle()
    with served.sessions.begin() as s:
        assert store.mark_running(s, job, served.clock(), f"x.{job}")


def test_show_lists_the_job_its_attempts_and_hides_private_fields(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = cli(served, "alice", "submit", "--gpus", "1", "--name", "t",
                       "--time-limit", "10", "--", "python", "t.py", capsys=capsys)  # fmt: skip
    assert code == 0 and "QUEUED" in out
    start(served, 1)
    served.clock.advance(120)
    code, out, err = cli(served, "alice", "show", "1", capsys=capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "job 1 (t): RUNNING"
    assert "  command:   python t.py" in lines
    assert any(line.startswith("  directory: /") for line in lines)
    assert "  elapsed:   2.0m; time limit 10.0m; left 8.0m" in lines
    attempt = lines[lines.index("attempts:") + 2].split()
    assert attempt[:3] == ["1", served_where(served, 1), "1"]
    assert attempt[3:9] == ["2m", "ago", "2m", "ago", "-", "RUNNING"]
    code, out, _ = cli(served, "bob", "show", "1", capsys=capsys)  # not bob's: squeue's view
    assert code == 0
    assert "  command:   (hidden)" in out and "  directory: (hidden)" in out
    assert "python t.py" not in out


def served_where(served: Served, job: int) -> str:  # noqa: F811
    with served.sessions() as s:
        record = store.get_job(s, job)
    return f"{record.node_name}/{record.tier_name}"


def test_jobs_shows_elapsed_and_time_left_and_writes_csv_with_stable_columns(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in ("a", "b"):
        assert cli(served, "alice", "submit", "--gpus", "1", "--name", name,
                   "--time-limit", "60", "--", "true", capsys=capsys)[0] == 0  # fmt: skip
    start(served, 1)
    served.clock.advance(600)
    code, out, _ = cli(served, "alice", "jobs", "--mine", capsys=capsys)
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split()[-3:] == ["ELAPSED", "TIME-LEFT", "ENDED"]
    by_id = {row.split()[0]: row.split() for row in rows}
    assert by_id["1"][-3:] == ["10.0m", "50.0m", "-"]
    assert by_id["1"][6] == "RUNNING"
    code, out, _ = cli(served, "alice", "jobs", "--format", "csv", capsys=capsys)
    assert code == 0
    table = list(csv.DictReader(io.StringIO(out)))
    assert tuple(csv.DictReader(io.StringIO(out)).fieldnames or ()) == CSV_COLUMNS
    assert [r["id"] for r in table] == ["2", "1"]
    assert table[1]["elapsed_s"] == "600.000" and table[1]["started_at"] == "2026-01-05T09:00:00Z"
    assert table[0]["state"] == "DISPATCHED" and table[0]["elapsed_s"] == ""
    code, out, _ = cli(served, "alice", "jobs", "--format", "csv", "--until",
                       "2026-01-05T08:00:00Z", capsys=capsys)  # fmt: skip
    assert code == 0 and out.strip() == ",".join(CSV_COLUMNS)
    code, _, err = cli(served, "alice", "jobs", "--since", "yesterday", capsys=capsys)
    assert code == 1 and err.startswith("error VALIDATION_ERROR: since='yesterday'")


def test_cancel_several_jobs_by_id_state_and_name_mine_only(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    for user, name in (("alice", "sweep"), ("alice", "sweep"), ("alice", "other"),
                       ("bob", "sweep")):  # fmt: skip
        assert cli(served, user, "submit", "--gpus", "1", "--name", name, "--", "true",
                   capsys=capsys)[0] == 0  # fmt: skip
    code, out, err = cli(served, "alice", "cancel", "--name", "sweep", capsys=capsys)
    assert code == 0, err
    assert [line.split()[:3] for line in out.splitlines()] == [
        ["cancelled", "job", "2"],
        ["cancelled", "job", "1"],
    ]  # bob's sweep is not alice's: the filter selects her jobs only
    code, out, err = cli(served, "alice", "cancel", "3", "4", capsys=capsys)
    assert code == 1
    assert out.startswith("cancelled job 3 (other)")
    assert err.startswith("error FORBIDDEN: job 4 belongs to bob (beta)")
    code, _, err = cli(served, "alice", "cancel", "--state", "QUEUED", capsys=capsys)
    assert code == 0 and err == ""  # nothing of hers is left queued
    code, out, _ = cli(served, "root", "cancel", "--user", "bob", "--json", capsys=capsys)
    assert code == 0
    answer = json.loads(out)
    assert [j["id"] for j in answer["cancelled"]] == [4] and answer["refused"] == []
    code, _, err = cli(served, "alice", "cancel", capsys=capsys)
    assert code == 2 and "name the jobs to cancel" in err


def test_wait_returns_when_the_job_leaves_the_queue_or_times_out(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli(served, "alice", "submit", "--gpus", "1", "--", "true", capsys=capsys)[0] == 0
    served.cycle()  # every GPU busy (the fixture's world): it stays queued
    code, _, err = cli(served, "alice", "wait", "1", "--started", "--timeout", "0.3",
                       "--poll", "0.1", capsys=capsys)  # fmt: skip
    assert code == 124 and err.startswith("error TIMEOUT: after 0s job 1 had not left the queue")
    start(served, 1)
    code, out, _ = cli(served, "alice", "wait", "1", "--started", capsys=capsys)
    assert code == 0 and out.startswith("job 1 (true): RUNNING on node-")
    with served.sessions.begin() as s:
        assert store.end_job(s, 1, store.JobState.FAILED, served.clock(), exit_code=2)
    code, out, _ = cli(served, "alice", "wait", "1", capsys=capsys)
    assert code == 2 and out.startswith("job 1 (true): FAILED on node-")  # its exit code
    assert "exit code 2" in out


def test_submit_wait_started_returns_once_dispatched(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    served.busy.clear()
    polls: list[float] = []

    def one_cycle(seconds: float) -> None:  # the dispatcher runs while the client sleeps
        polls.append(seconds)
        served.cycle()

    monkeypatch.setattr("jpushare.client.job_commands.time.sleep", one_cycle)
    code, out, err = cli(served, "alice", "submit", "--gpus", "2", "--wait-started", "--",
                         "true", capsys=capsys)  # fmt: skip
    assert code == 0, err
    first, second = out.splitlines()
    assert first.startswith("submitted job 1 (true): 2 GPUs, tier >= rtx3080ti, QUEUED;")
    assert second.startswith("job 1 (true): DISPATCHED on node-")
    assert polls == [1.0]


def test_labs_print_rank_share_and_usage_in_flight(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli(served, "alice", "submit", "--gpus", "2", "--", "true", capsys=capsys)[0] == 0
    start(served, 1)
    served.clock.advance(100)
    code, out, _ = cli(served, "bob", "labs", capsys=capsys)
    assert code == 0
    header, alpha, beta, *_ = out.splitlines()
    assert header.split()[:2] == ["RANK", "LAB"] and "IN FLIGHT" in header
    cells = alpha.split()
    assert cells[:3] == ["1", "alpha", "0"] and cells[3] == "-"  # no usage yet: no share
    tier = served_where(served, 1).split("/")[1]
    tflops = {"rtx3080ti": 34.1, "rtx4090": 82.6, "rtx5090": 104.8}[tier]
    assert cells[4] == amount(2 * 100 * tflops)
    assert cells[5:] == ["1", "2", "0", "0"]
    assert beta.split()[:2] == ["2", "beta"]
