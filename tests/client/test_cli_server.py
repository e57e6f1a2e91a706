"""The user CLI against a real uvicorn server on localhost, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.api import create_app
from jpushare.client import ApiError, Client
from jpushare.client.cli import main
from jpushare.policy import decide
from tests.api.conftest import ALL_BUSY, Clock, build_world
from tests.client.server import running_server
from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401
from tests.unix_accounts import require_root_and_munge


class Served:
    def __init__(
        self,
        url: str,
        tokens: dict[str, str],
        busy: dict[tuple[str, str], int],
        factory: sessionmaker[Session],
        clock: Clock,
        tmp: Path,
    ):
        self.tmp = tmp
        self.url = url
        self.tokens = tokens
        self.busy = busy
        self.sessions = factory
        self.clock = clock

    def token_file(self, secret: str) -> str:
        """A file holding `secret`, for --token-file (a token is never an argument)."""
        path = self.tmp / f"token-{len(list(self.tmp.glob('token-*')))}"
        path.write_text(secret + "\n")
        path.chmod(0o600)
        return str(path)

    def cycle(self) -> None:
        """One dispatcher cycle's database work (as tests/api's `ApiWorld.cycle`)."""
        with self.sessions.begin() as s:
            now = self.clock()
            store.record_decisions(s, decide(store.load_snapshot(s, now, self.busy)), now)


@pytest.fixture
def served(
    sessions: sessionmaker[Session],  # noqa: F811 (the fixture)
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[Served]:
    clock = Clock()
    tokens, _ = build_world(sessions, clock)
    busy: dict[tuple[str, str], int] = dict(ALL_BUSY)
    app = create_app(sessions, clock=clock, observed_busy=lambda _s: busy)
    monkeypatch.delenv("JPUSHARE_URL", raising=False)
    monkeypatch.delenv("JPUSHARE_TOKEN", raising=False)
    (tmp_path / "client.json").write_text("{}")
    monkeypatch.setenv("JPUSHARE_CLIENT_CONFIG", str(tmp_path / "client.json"))
    with running_server(app) as url:
        yield Served(url, tokens, busy, sessions, clock, tmp_path)


def cli(
    served: Served, user: str, *argv: str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    token_file = served.token_file(served.tokens[user])
    code = main([argv[0], "--url", served.url, "--token-file", token_file, *argv[1:]])
    out, err = capsys.readouterr()
    return code, out, err


def test_submit_jobs_queue_why_cancel(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    served.busy[("node-c", "rtx5090")] = 2
    code, out, err = cli(
        served, "alice", "submit", "--gpus", "4", "--name", "big", "--", "python", "t.py",
        "--lr", "0.1 x", capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    assert out.startswith("submitted job 1 (big): 4 GPUs, tier >= rtx3080ti, QUEUED")

    code, out, _ = cli(served, "bob", "submit", "--gpus", "1", "--json", "--", "nvidia-smi -L",
                       capsys=capsys)  # fmt: skip
    assert code == 0
    small = json.loads(out)
    assert small["command"] == "nvidia-smi -L" and small["name"] == "nvidia-smi"

    # Token from the environment this time.
    monkeypatch.setenv("JPUSHARE_TOKEN", served.tokens["alice"])
    monkeypatch.setenv("JPUSHARE_URL", served.url)
    assert main(["jobs", "--json"]) == 0
    jobs = json.loads(capsys.readouterr().out)["data"]
    assert [(j["id"], j["command"]) for j in jobs] == [
        (2, None),  # bob's: private to him, his lab's PIs and admins
        (1, "python t.py --lr '0.1 x'"),
    ]
    assert main(["jobs", "--mine"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "ID", "NAME", "USER", "LAB", "GPUS", "MIN-TIER", "STATE", "WHERE", "SUBMITTED",
        "ELAPSED", "TIME-LEFT", "ENDED",
    ]  # fmt: skip
    assert len(lines) == 2 and lines[1].split()[:4] == ["1", "big", "alice", "alpha"]

    # Before any cycle: nothing is reserved; the next cycle's reservation is a projection.
    assert main(["queue"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["RANK", "JOB", "NAME"]
    assert "RESERVED  NEXT CYCLE" in lines[0]
    assert [line.split()[:2] for line in lines[1:]] == [["1", "1"], ["2", "2"]]
    assert "  -  " in lines[1] and "reserve 2 node-c/rtx5090  WAITING_FOR_GPUS" in lines[1]
    assert main(["why", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("job 2: WAITING_FOR_GPUS (rank 2 of 2)")
    assert "At the next cycle top job 1 will reserve 2 GPUs on node-c (rtx5090)" in out

    served.cycle()
    assert main(["queue"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "2/4 node-c/rtx5090  -           RESERVING" in lines[1]
    assert "BEHIND_RESERVATION" in lines[2]
    assert main(["why", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("job 2: BEHIND_RESERVATION (rank 2 of 2)")
    assert "reserved by the top job 1" in out and "fit placements:" in out
    row = next(line for line in out.splitlines() if "node-c  rtx5090" in line)
    assert row.split()[2:] == ["4", "2", "2", "0", "yes", "job", "1:", "2/4"]

    # bob may not cancel alice's job: one line, exit 1, no traceback.
    code, out, err = cli(served, "bob", "cancel", "1", capsys=capsys)
    assert code == 1 and out == ""
    assert err.startswith("error FORBIDDEN: job 1 belongs to alice (alpha)")
    assert len(err.strip().splitlines()) == 1

    assert main(["cancel", "1"]) == 0
    assert capsys.readouterr().out.startswith("cancelled job 1 (big)")
    assert main(["cancel", "1"]) == 1
    assert capsys.readouterr().err.startswith("error CONFLICT: job 1 is CANCELLED: cannot cancel")
    assert main(["why", "1"]) == 0
    assert "CANCELLED at 2026-01-05 09:00:00 UTC (cancelled by alice)" in capsys.readouterr().out

    for command in ("labs", "placements", "tiers"):
        assert main([command]) == 0, command
        out = capsys.readouterr().out
        assert len(out.splitlines()) >= 3
    code, out, _ = cli(served, "bob", "log", "2", capsys=capsys)
    assert code == 0 and "has not run yet" in out


def test_errors_are_one_line_with_the_code(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = cli(served, "alice", "submit", "--gpus", "8", "--", "x", capsys=capsys)
    assert code == 1
    assert err.splitlines() == [
        "error NO_FIT_PLACEMENT: no placement can hold num_gpus=8 at tier >= rtx3080ti; "
        "the largest fit is 4",
        "  try: --gpus 4 --min-tier rtx3080ti (4 placements fit)",
    ]
    code, _, err = cli(served, "alice", "submit", "--gpus", "9", "--", "x", capsys=capsys)
    assert code == 1 and err.startswith("error VALIDATION_ERROR: num_gpus:")
    code, _, err = cli(served, "alice", "why", "999", capsys=capsys)
    assert (code, err.strip()) == (1, "error NOT_FOUND: no job 999")
    code = main(["queue", "--url", served.url, "--token-file", served.token_file("jps_wrong")])
    assert code == 1 and capsys.readouterr().err.startswith("error UNAUTHENTICATED:")
    monkeypatch.setattr("jpushare.client.cli.default_munge", lambda: None)
    code = main(["queue", "--url", served.url])
    assert code == 1 and "error UNAUTHENTICATED: no token and no MUNGE" in capsys.readouterr().err
    code = main(["queue", "--url", "http://127.0.0.1:9", "--token-file", served.token_file("x")])
    assert code == 1 and capsys.readouterr().err.startswith("error UNREACHABLE:")


def test_usage_errors_exit_2(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["why", "abc"], ["jobs", "--state", "SLEEPING"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2, argv
    code, _, err = cli(served, "alice", "submit", "--gpus", "1", capsys=capsys)
    assert code == 2 and "needs a command" in err
    code, _, err = cli(served, "alice", "submit", "--", "x", capsys=capsys)
    assert code == 2 and "submit needs a number of GPUs: --gpus N (or sbatch's -G N" in err


def test_the_client_class_raises_typed_errors(served: Served) -> None:
    with Client(served.url, served.tokens["alice"]) as api:
        job = api.submit("x", "true", 1, workdir="/tmp")
        assert api.job(job["id"])["state"] == "GLOBAL_QUEUE_WAIT"
        assert api.healthz()["database"] == "ok"  # no dispatcher here: status "degraded"
        assert "jpushare_queue_length 1.0" in api.metrics()
        with pytest.raises(ApiError) as exc:
            api.create_lab("gamma")
        assert (exc.value.code, exc.value.status) == ("FORBIDDEN", 403)
    with Client(served.url, served.tokens["root"]) as admin:
        assert admin.create_lab("gamma")["name"] == "gamma"
        assert admin.create_user("gil", "gamma", unix_user="nobody")["role"] == "student"
        secret = admin.issue_token("gil")["secret"]
        assert [n["name"] for n in admin.nodes()["data"]] == ["node-a", "node-b", "node-c"]
    with Client(served.url, secret) as gil:
        assert gil.cancel(gil.submit("y", "true", 2, workdir="/tmp")["id"])["state"] == "CANCELLED"


def test_without_a_token_the_cli_signs_in_with_munge(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a host with MUNGE the CLI needs no token: it is the user whose Unix account runs
    it (this test runs as root, and the world's user `root` is that account's user); a
    configured token still wins."""
    require_root_and_munge()
    served.clock.now = datetime.now(UTC)  # a credential carries the real time
    code = main(["submit", "--url", served.url, "--gpus", "1", "--json", "--", "true"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["user"] == "root"
    code = main(["jobs", "--url", served.url, "--mine", "--json"])
    assert code == 0
    assert [j["user"] for j in json.loads(capsys.readouterr().out)["data"]] == ["root"]
    code = main(["submit", "--url", served.url, "--token-file", served.token_file(
        served.tokens["bob"]), "--json", "--gpus", "1", "--", "true"])  # fmt: skip
    assert code == 0 and json.loads(capsys.readouterr().out)["user"] == "bob"


def test_cancelling_a_running_job_says_its_charge_is_provisional(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    """A running job is charged up to the cancel; the run's real end settles it later."""
    served.busy.clear()  # every GPU idle: the job dispatches at the next cycle
    code, out, _ = cli(served, "alice", "submit", "--gpus", "1", "--", "sleep 60", capsys=capsys)
    assert code == 0
    job = int(re.search(r"job (\d+)", out).group(1))  # type: ignore[union-attr]
    served.cycle()
    with served.sessions.begin() as s:
        assert store.mark_running(s, job, served.clock(), f"{job}.1")
    served.clock.advance(30)
    code, out, _ = cli(served, "alice", "cancel", str(job), capsys=capsys)
    assert code == 0 and out.startswith(f"cancelled job {job} ")
    assert "so far (provisional: corrected when the run's real end is known)" in out
    # A job cancelled in the queue held nothing that could still change.
    code, out, _ = cli(served, "alice", "submit", "--gpus", "1", "--", "true", capsys=capsys)
    queued = int(re.search(r"job (\d+)", out).group(1))  # type: ignore[union-attr]
    code, out, _ = cli(served, "alice", "cancel", str(queued), capsys=capsys)
    assert code == 0 and "provisional" not in out
