"""An array as a Slurm user names it in `queue` and `squeue` (squeue -j ID / ID_TASK, tasks
shown as ID_TASK) and in `update` (scontrol update on an ArrayJobId: every task still
queued), through the CLI against a real server on both databases."""

from __future__ import annotations

import json

import pytest

from tests.client.test_cli_server import Served, cli, served  # noqa: F401 (the fixture)
from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401


def _first_column(out: str) -> list[str]:
    """The JOB column of `queue`'s table (its footer line left out)."""
    return [line.split()[1] for line in out.splitlines()[1:] if not line.startswith("(")]


def test_queue_and_squeue_take_job_refs_and_show_tasks_as_id_task(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = cli(served, "alice", "submit", "--json", "--array", "0-2", "-G", "1",
                         "-J", "sweep", "--", "true", capsys=capsys)  # fmt: skip
    assert code == 0, err
    array = json.loads(out)["id"]
    code, out, _ = cli(served, "bob", "submit", "--json", "-G", "1", "--", "true", capsys=capsys)
    other = json.loads(out)["id"]

    code, out, err = cli(served, "alice", "queue", capsys=capsys)
    assert code == 0, err
    rows = [line.split() for line in out.splitlines()[1:]]
    assert sorted(r[1] for r in rows) == sorted([f"{array}_{t}" for t in range(3)] + [str(other)])
    code, out, err = cli(served, "alice", "queue", str(array), capsys=capsys)
    assert code == 0, err
    assert sorted(_first_column(out)) == [f"{array}_{t}" for t in range(3)]
    assert "(3 of 3 selected; 4 queued)" in out
    code, out, _ = cli(served, "alice", "queue", f"{array}_1", str(other), capsys=capsys)
    assert sorted(_first_column(out)) == sorted([f"{array}_1", str(other)])
    code, out, _ = cli(served, "alice", "queue", "--json", f"{array}_2", capsys=capsys)
    (entry,) = json.loads(out)["data"]
    assert entry["display_id"] == f"{array}_2" and entry["job_id"] == array + 2

    code, out, _ = cli(served, "alice", "squeue", "-j", f"{array}_2,{other}", capsys=capsys)
    assert code == 0
    assert sorted(line.split()[0] for line in out.splitlines()[1:]) == sorted(
        [f"{array}_2", str(other)]
    )
    code, out, err = cli(served, "alice", "queue", f"{array}_7", capsys=capsys)
    assert code == 2 and f"no task 7 in an array {array}" in err


def test_update_on_an_arrays_id_changes_every_queued_task(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = cli(served, "alice", "submit", "--json", "--array", "0-2", "-G", "1",
                         "-J", "sweep", "--", "true", capsys=capsys)  # fmt: skip
    assert code == 0, err
    array = json.loads(out)["id"]
    tasks = json.loads(out)["array_task_ids"]
    code, _, err = cli(served, "alice", "cancel", f"{array}_0", capsys=capsys)
    assert code == 0, err
    code, out, err = cli(served, "alice", "update", str(array), "-J", "renamed", "-t", "10",
                         capsys=capsys)  # fmt: skip
    assert code == 0, err
    assert [line.split()[2] for line in out.splitlines()] == [f"{array}_1", f"{array}_2"]
    names = {}
    for task in tasks:
        code, out, _ = cli(served, "alice", "show", "--json", str(task), capsys=capsys)
        job = json.loads(out)["job"]
        names[job["display_id"]] = (job["name"], job["time_limit_s"])
    assert names[f"{array}_0"][0] == "sweep"  # cancelled: not queued, not changed
    assert names[f"{array}_1"] == names[f"{array}_2"] == ("renamed", 600.0)
    code, out, err = cli(served, "alice", "update", f"{array}_2", "-J", "only", capsys=capsys)
    assert code == 0 and out.split()[2] == f"{array}_2", err
    code, out, _ = cli(served, "alice", "show", "--json", f"{array}_1", capsys=capsys)
    assert json.loads(out)["job"]["name"] == "renamed"
