"""The driver's timing and bookkeeping with a recording runner and a fake clock (the real
commands are tests/slurm_peer/test_live_peer.py's)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from jpushare.cli import main
from jpushare.formats.cluster_file import load_cluster
from jpushare.formats.trace_file import TraceJob
from jpushare.slurm_peer.driver import PeerError, ensure_accounts, submit_all
from jpushare.slurm_peer.plan import plan_requests

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = load_cluster(ROOT / "examples" / "slurm-cluster.yaml")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.4

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


class Recorder:
    def __init__(self, clock: Clock, refuse: str = "") -> None:
        self.calls: list[tuple[float, list[str]]] = []
        self.clock = clock
        self.refuse = refuse
        self.next_id = 100

    def __call__(self, argv: Sequence[str], stdin: str | None) -> tuple[int, str, str]:
        self.calls.append((self.clock.t, list(argv)))
        if argv[0] == "sbatch":
            if self.refuse and any(self.refuse in a for a in argv):
                return 1, "", "sbatch: error: Invalid account or account/partition combination"
            self.next_id += 1
            return 0, f"{self.next_id}\n", ""
        return 0, "", ""


def test_submits_and_cancels_at_scaled_times_from_a_whole_second() -> None:
    clock = Clock()
    run = Recorder(clock, refuse="job-name=peer-c")
    jobs = [
        TraceJob("a", 0.0, 600.0, 1, "NLP"),
        TraceJob("b", 120.0, 600.0, 4, "KDG", cancel_time=300.0),
        TraceJob("c", 120.0, 60.0, 1, "BCG"),
    ]
    log = submit_all(run, plan_requests(jobs, CLUSTER, 60.0), "peer-", clock=clock.now,
                     sleep=clock.sleep)  # fmt: skip
    assert log.t0 == 1003.0  # the next whole second, plus 2
    when = {argv[2]: t - log.t0 for t, argv in run.calls if argv[0] == "sbatch"}
    assert when["--job-name=peer-a"] == pytest.approx(0.0, abs=1e-6)
    assert when["--job-name=peer-b"] == pytest.approx(2.0, abs=1e-6)
    (cancel,) = [(t - log.t0, argv) for t, argv in run.calls if argv[0] == "scancel"]
    assert cancel[0] == pytest.approx(5.0, abs=1e-6) and cancel[1] == ["scancel", "102"]
    assert log.slurm_ids == {"a": "101", "b": "102"}
    assert log.cancelled == ["b"]
    assert "Invalid account" in log.refused["c"]


def test_accounts_are_added_once_and_their_usage_reset() -> None:
    calls: list[list[str]] = []

    def run(argv: Sequence[str], stdin: str | None) -> tuple[int, str, str]:
        calls.append(list(argv))
        if argv[:4] == ["sacctmgr", "-n", "-P", "show"] and argv[4] == "account":
            return 0, "root\nnlp\n", ""
        if argv[:4] == ["sacctmgr", "-n", "-P", "show"]:
            return 0, "root\nnlp\n", ""
        return 0, "", ""

    assert ensure_accounts(run, ["NLP", "KDG"]) == ["kdg", "nlp"]
    adds = [c for c in calls if c[:3] == ["sacctmgr", "-i", "add"]]
    assert adds == [
        ["sacctmgr", "-i", "add", "account", "kdg", "Fairshare=1"],
        ["sacctmgr", "-i", "add", "user", "root", "account=kdg"],
    ]
    resets = [c[4] for c in calls if "RawUsage=0" in c]
    assert resets == ["kdg", "nlp"]

    def refuse(argv: Sequence[str], stdin: str | None) -> tuple[int, str, str]:
        return 1, "", "sacctmgr: error: Problem talking to the database"

    with pytest.raises(PeerError, match="Problem talking to the database"):
        ensure_accounts(refuse, ["NLP"])


def test_cli_agree_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "jobs.csv"
    csv.write_text(
        "job_id,lab,num_gpus,state,submit_time,start_time,end_time,node,tier,wait_s,"
        "attempts,run_cost,reservation_cost\nj,L,1,COMPLETED,0,60,90,node-a,rtx4090,60,1,0,0\n",
        encoding="utf-8",
    )
    assert main(["slurm-peer", "agree", str(csv), str(csv)]) == 0
    out = capsys.readouterr().out
    assert "100%" in out and "all" in out
    assert main(["slurm-peer", "agree", str(csv), str(tmp_path / "none.csv")]) == 2
    bad = tmp_path / "trace.csv"
    bad.write_text("job_id,submit_time,duration,num_gpus,lab\nj,0,10,9,L\n", encoding="utf-8")
    code = main(["slurm-peer", "run", "--cluster", str(ROOT / "examples" / "slurm-cluster.yaml"),
                 "--trace", str(bad), "--speed", "60", "--out", str(tmp_path / "o")])  # fmt: skip
    assert code == 2
    assert "num_gpus must be 1-8" in capsys.readouterr().err
