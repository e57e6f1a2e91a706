"""`jpushare replay` against a real service (local executor): outputs, refusals, Ctrl-C."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jpushare.cli import main
from tests.dispatcher.conftest import wait_for
from tests.dispatcher.processes import REPO
from tests.replay.conftest import Running, serve

SMALL = """job_id,submit_time,duration,num_gpus,lab,min_tier,cancel_time,oom_on
a,0,30,1,NLP,rtx5090,,
b,0,30,8,BCG,,,
c,0,600,2,KDG,,12,
d,6,12,1,NLP,,,rtx3080ti;rtx4090;rtx5090
"""


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Running]:
    yield from serve(tmp_path, 0.3)


def replay_args(
    s: Running, trace: Path, out: Path, *more: str, token: str | None = None
) -> list[str]:
    """The replay's arguments; the token goes in a file beside `out` (never in argv)."""
    token_file = out.parent / "admin-token"
    token_file.write_text((token or s.admin_token) + "\n")
    token_file.chmod(0o600)
    return [
        "replay",
        "--trace",
        str(trace),
        "--server",
        s.url,
        "--admin-token-file",
        str(token_file),
        "--speed",
        "30",
        "--out",
        str(out),
        "--no-progress",
        *more,
    ]


def test_a_replay_writes_the_simulators_files_from_the_services_records(
    service: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(SMALL)
    assert main(replay_args(service, trace, tmp_path / "out")) == 0
    rows = {r["job_id"]: r for r in csv.DictReader((tmp_path / "out" / "jobs.csv").open())}
    assert list(rows) == ["a", "b", "c", "d"]
    assert (rows["a"]["state"], rows["a"]["tier"]) == ("COMPLETED", "rtx5090")
    assert rows["b"]["state"] == "REJECTED"  # no placement has 8 GPUs
    assert rows["c"]["state"] == "CANCELLED"
    # d runs out of memory on every tier (PyTorch's message, read by the executor) and fails
    # after its attempt on the strongest.
    assert (rows["d"]["state"], rows["d"]["tier"]) == ("FAILED", "rtx5090")
    assert int(rows["d"]["attempts"]) >= 1
    # Times are trace seconds: a 30 s job ran about 30 s (one real second at 30x).
    run = float(rows["a"]["end_time"]) - float(rows["a"]["start_time"])
    assert 30 <= run < 45
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["cycle_s"] == pytest.approx(9.0)  # 0.3 s at 30x
    assert summary["attempts"]["oom"] >= 1
    about = json.loads((tmp_path / "out" / "replay.json").read_text())
    assert [j["job_id"] for j in about["jobs"]] == ["a", "b", "c", "d"]
    assert about["jobs"][1]["service_id"] is None
    users = httpx.get(
        f"{service.url}/v1/admin/users",
        headers={"Authorization": f"Bearer {service.admin_token}"},
    ).json()["data"]
    assert {u["name"] for u in users} >= {"replay-nlp", "replay-bcg", "replay-kdg"}
    assert "outputs in" in capsys.readouterr().out


def test_a_service_that_holds_jobs_is_refused_and_ctrl_c_cancels_what_was_submitted(
    service: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    headers = {"Authorization": f"Bearer {service.user_token}"}
    body = {"name": "x", "command": "sleep 1", "num_gpus": 1, "workdir": str(tmp_path)}
    assert httpx.post(f"{service.url}/v1/jobs", json=body, headers=headers).status_code == 201
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "job_id,submit_time,duration,num_gpus,lab\n"
        + "".join(f"j{i},{i * 3},3000,1,NLP\n" for i in range(20))
    )
    assert main(replay_args(service, trace, tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert "already holds jobs" in err and "--allow-existing-jobs" in err

    env = {k: v for k, v in os.environ.items() if not k.startswith("JPUSHARE_")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jpushare.cli",
            *replay_args(service, trace, tmp_path / "out", "--allow-existing-jobs"),
        ],
        cwd=REPO,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    admin = {"Authorization": f"Bearer {service.admin_token}"}

    def replay_jobs() -> list[dict[str, object]]:
        jobs = httpx.get(f"{service.url}/v1/jobs", params={"user": "replay-nlp"}, headers=admin)
        return list(jobs.json()["data"])

    wait_for(lambda: len(replay_jobs()) >= 2, "the replay has submitted two jobs")
    # Every user of the host can read the replay's arguments: the token is not in them.
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    assert b"--admin-token-file" in cmdline and service.admin_token.encode() not in cmdline
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted: cancelled" in err
    assert {j["state"] for j in replay_jobs()} == {"CANCELLED"}


def test_bad_input_and_an_unreachable_service_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JPUSHARE_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("JPUSHARE_TOKEN", raising=False)
    with pytest.raises(SystemExit) as exc:
        main(["replay", "--trace", "t.csv"])
    assert exc.value.code == 2
    assert (
        "required: --server, --admin-token-file (or $JPUSHARE_ADMIN_TOKEN), --out"
        in capsys.readouterr().err
    )
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus,lab\nj,0,1,9,NLP\n")
    base = ["replay", "--trace", str(trace), "--out", str(tmp_path)]
    monkeypatch.setenv("JPUSHARE_ADMIN_TOKEN", "jps_from_the_environment")
    assert main([*base, "--server", "http://127.0.0.1:9"]) == 2
    assert "num_gpus must be 1-8" in capsys.readouterr().err
    trace.write_text("job_id,submit_time,duration,num_gpus,lab\nj,0,1,1,NLP\n")
    assert main([*base, "--server", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("jpushare replay: the service does not answer") and err.count("\n") == 1


def test_a_token_that_is_not_an_admins_is_refused(
    service: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus,lab\nj,0,1,1,NLP\n")
    args = replay_args(service, trace, tmp_path / "out", token=service.user_token)
    assert main(args) == 2
    assert "the admin token was refused" in capsys.readouterr().err


def test_an_admin_token_in_argv_is_refused_and_the_file_and_stdin_ways_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "jps_admin_secret_in_argv"
    for given in (["--admin-token", secret], [f"--admin-token={secret}"], ["--admin-token"]):
        with pytest.raises(SystemExit) as exc:
            main(["replay", "--trace", "t.csv", *given, "--out", str(tmp_path)])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and secret not in err
        assert "--admin-token-file PATH" in err and "JPUSHARE_ADMIN_TOKEN" in err

    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus,lab\nj,0,1,1,NLP\n")
    base = ["replay", "--trace", str(trace), "--server", "http://127.0.0.1:9"]
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert main([*base, "--admin-token-file", str(empty), "--out", str(tmp_path)]) == 2
    assert "no token in it" in capsys.readouterr().err
    # Read from a file, or from stdin: the run goes on to the (unreachable) service.
    token_file = tmp_path / "token"
    token_file.write_text("jps_x\n")
    assert main([*base, "--admin-token-file", str(token_file), "--out", str(tmp_path)]) == 1
    assert "the service does not answer" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", io.StringIO("jps_x\n"))
    assert main([*base, "--admin-token-file", "-", "--out", str(tmp_path)]) == 1
    assert "the service does not answer" in capsys.readouterr().err
