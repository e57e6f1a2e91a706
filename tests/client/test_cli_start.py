"""`jpushare queue --start` and `--time-limit` in Slurm's forms, against a real server."""

from __future__ import annotations

import json

import pytest

from tests.client.test_cli_server import Served, cli, served  # noqa: F401 (the fixture)
from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401


def test_queue_start_shows_each_jobs_estimated_start_and_basis(
    served: Served,  # noqa: F811 (the fixture)
    capsys: pytest.CaptureFixture[str],
) -> None:
    served.busy[("node-c", "rtx5090")] = 0
    code, out, err = cli(
        served, "alice", "submit", "--gpus", "4", "--min-tier", "rtx5090", "--time-limit", "90",
        "--json", "--", "train", capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["time_limit_s"] == 90 * 60  # sbatch: minutes
    served.cycle()  # job 1 starts on node-c's 5090s; every other GPU is busy outside
    served.busy[("node-c", "rtx5090")] = 4
    code, out, err = cli(
        served, "alice", "submit", "--gpus", "4", "--min-tier", "rtx5090", "-t", "1-00:00:00",
        "--json", "--", "next", capsys=capsys,
    )  # fmt: skip
    assert code == 0, err and json.loads(out)["time_limit_s"] == 86400
    code, _, err = cli(served, "bob", "submit", "--gpus", "1", "--", "x", capsys=capsys)
    assert code == 0, err

    code, out, err = cli(served, "alice", "queue", "--start", capsys=capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[-2:] == ["START", "BASIS"]
    row = {line.split()[1]: line for line in lines[1:]}
    # Job 1 reaches its limit 90 minutes after the server's T0 (09:00) and its lab is billed:
    # bob's lab has used less, so his 1-GPU job (no limit, no history: the default hour)
    # takes a 5090 first, and alice's 4-GPU job starts when it ends.
    assert "2026-01-05 10:30 UTC (" in row["3"] and row["3"].endswith("default")
    assert "2026-01-05 11:30 UTC (" in row["2"] and row["2"].endswith("time_limit")
    code, out, _ = cli(served, "alice", "queue", capsys=capsys)
    assert "START" not in out.splitlines()[0]


def test_a_bad_time_limit_is_a_usage_error_naming_the_forms(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from jpushare.client.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["submit", "--gpus", "1", "--time-limit", "soon", "--", "x"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "time limit 'soon' is not understood" in err and "1h30m" in err
