"""A Slurm user's small habits: `log --follow` on a queued job waits for it to start, a
closed pipe ends a command quietly, sizes and times are refused in the user's units, and
NaN or infinity is refused by name. Through the CLI against a real server (both
databases), and as a real process where the habit is the process's own (the pipe)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.cli import main as jpushare
from jpushare.client.cli import main
from jpushare.store.lab_events import set_lab_usage_recorded
from tests.client.test_cli_server import Served, cli, served  # noqa: F401 (the fixture)
from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401


def test_log_follow_on_a_queued_job_waits_for_it_to_start(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    workdir = tmp_path / "run"
    workdir.mkdir()
    code, _, err = cli(served, "root", "submit", "--gpus", "1", "--chdir", str(workdir),
                       "--", "echo hello", capsys=capsys)  # fmt: skip
    assert code == 0, err
    polls: list[str] = []

    def the_job_starts_then_ends(seconds: float) -> None:  # while the client sleeps
        polls.append("poll")
        if len(polls) != 3:
            return  # still queued for two polls; after the third, only the log is read
        served.busy.clear()
        served.cycle()
        (workdir / "jpushare-1.out").write_text("hello\n")
        with served.sessions.begin() as s:
            assert store.end_job(s, 1, store.JobState.COMPLETED, served.clock(), exit_code=0)

    monkeypatch.setattr("jpushare.client.log_command.time.sleep", the_job_starts_then_ends)
    code, out, err = cli(served, "root", "log", "1", "--follow", capsys=capsys)
    assert code == 0, err
    assert "(job 1 is queued: waiting for it to start)" in err
    assert out == "hello\n" and len(polls) == 4  # 2 queued, 1 starts it, 1 reads the end
    # without --follow a queued job's log is still answered at once
    assert cli(served, "root", "submit", "--gpus", "1", "--", "true", capsys=capsys)[0] == 0
    code, out, _ = cli(served, "root", "log", "2", capsys=capsys)
    assert code == 0 and "has not run yet" in out and len(polls) == 4


def run_into_a_closed_pipe(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """`jpushare ARGV | head -0`, deterministically: stdout is a pipe nobody reads."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "jpushare.cli", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env={**os.environ, **(env or {})},
        )
    finally:
        os.close(write_end)
    return done.returncode, done.stderr


def test_a_closed_pipe_ends_the_command_quietly(served: Served) -> None:  # noqa: F811
    code, err = run_into_a_closed_pipe("--help")
    assert (code, err) == (0, "")
    token_file = served.token_file(served.tokens["alice"])
    code, err = run_into_a_closed_pipe("tiers", "--json", "--url", served.url,
                                       "--token-file", token_file)  # fmt: skip
    assert (code, err) == (0, "")
    code, err = run_into_a_closed_pipe("tiers", "--url", served.url, "--token-file", token_file)
    assert (code, err) == (0, "")


def test_a_bad_size_or_time_is_refused_in_the_users_units(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cases = {
        ("--time-limit", "400d"): "time limit '400d' is too long: at most 365 days",
        ("-t", "366-00:00:00"): "at most 365 days",
        ("--mem-per-gpu", "10T"): "'10T' is too much: at most 4T per GPU",
        ("--mem-per-gpu", "10M"): "'10M' is too little: at least 64M per GPU",
        ("--timeout", "nan"): "'nan' is not a number (NaN)",
        ("--timeout", "inf"): "'inf' is infinite",
    }
    for option, sentence in cases.items():
        with pytest.raises(SystemExit) as exc:
            main(["submit", "--gpus", "1", *option, "--", "true"])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and sentence in err, (option, err)
        assert "31536000" not in err and "4194304" not in err


def test_a_lab_usage_of_nan_or_infinity_is_refused_by_name(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JPUSHARE_DATABASE_URL", f"sqlite:///{tmp_path}/x.sqlite")
    for value, name in (("nan", "not a number (NaN)"), ("1e400", "infinite"), ("inf", "infinite")):
        with pytest.raises(SystemExit) as exc:
            jpushare(["admin", "lab", "set-usage", "X", value])
        assert exc.value.code == 2
        assert f"'{value}' is {name}" in capsys.readouterr().err


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_the_store_refuses_a_non_finite_usage_by_name(
    sessions: sessionmaker[Session],  # noqa: F811
    value: float,
) -> None:
    with sessions.begin() as s:
        store.create_lab(s, "X", store.utc_now())
    with sessions.begin() as s, pytest.raises(store.InvalidRequest) as exc:
        set_lab_usage_recorded(s, "X", value, store.utc_now())
    assert ("NaN" if math.isnan(value) else "infinite") in str(exc.value)
