"""`replay compare`: per-job agreement of two runs, the baseline, and the verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jpushare.cli import main
from jpushare.formats.cluster_file import load_cluster
from jpushare.formats.trace_file import load_trace
from jpushare.replay.compare import Tolerance, compare_dirs, compare_rows, problems
from jpushare.sim.engine import simulate
from jpushare.sim.report import write_outputs

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "examples" / "slurm-cluster.yaml"
TRACE = REPO / "tests" / "replay" / "fidelity-trace.csv"


def row(
    job_id: str,
    submit: float,
    wait: float | None,
    node: str = "node-a",
    tier: str = "rtx4090",
    reserved: float = 0.0,
    state: str = "COMPLETED",
) -> dict[str, str]:
    return {
        "job_id": job_id,
        "lab": "NLP",
        "num_gpus": "1",
        "state": state,
        "submit_time": str(submit),
        "wait_s": "" if wait is None else str(wait),
        "node": node if wait is not None else "",
        "tier": tier if wait is not None else "",
        "reservation_cost": str(reserved),
    }


def test_a_job_agrees_within_one_cycle_plus_the_tolerance_and_says_why_not() -> None:
    sim = [row("a", 0, 10), row("b", 0, 10), row("c", 0, 10), row("d", 0, 10), row("e", 0, None)]
    live = [
        row("a", 0, 40),  # 30 s later: inside 30
        row("b", 0, 41),  # 31 s later, dispatched at the simulated start: latency
        row("c", 0, 200),  # dispatched much later
        row("d", 0, 10, node="node-c", reserved=5.0),
        row("e", 0, None, state="CANCELLED"),
    ]
    jobs = compare_rows(sim, live, 30.0, {"b": 12.0, "c": 190.0})
    assert [j.agrees for j in jobs] == [True, False, False, False, False]
    assert jobs[1].why == "start +31s: start latency 29s"
    assert jobs[2].why == "start +190s: dispatched at another cycle"
    assert jobs[3].why == "placement node-a/rtx4090 vs node-c/rtx4090; reserved in the service"
    assert jobs[4].why == "state COMPLETED vs CANCELLED"


def test_runs_of_different_traces_are_refused() -> None:
    with pytest.raises(Exception, match="not the same trace"):
        compare_rows([row("a", 0, 1)], [row("b", 0, 1)], 5.0)


def test_a_simulation_predicts_itself_and_lies_inside_its_own_baseline(tmp_path: Path) -> None:
    cluster, trace = load_cluster(CLUSTER), load_trace(TRACE)
    write_outputs(simulate(cluster, trace, "reservation", 15.0), tmp_path / "live")
    report, fig, jobs = compare_dirs(
        None, tmp_path / "live", None, tmp_path / "cmp", cluster=cluster, trace=trace
    )
    assert fig["agree"] == 1.0 and all(j.agrees for j in jobs)
    assert len(fig["baseline"]["shifts"]) == 3  # no latency in a simulation
    # The trace is sensitive to the cycle phase: the simulator disagrees with itself.
    assert min(b["start_agree"] for b in fig["baseline"]["shifts"]) < 0.9
    live = json.loads((tmp_path / "live" / "summary.json").read_text())
    assert problems(fig, live, Tolerance()) == []
    assert "the simulator against itself" in report
    assert {p.name for p in (tmp_path / "cmp").iterdir()} == {
        "fidelity.csv",
        "fidelity.json",
        "fidelity.md",
        "sim",
    }


def test_a_replay_far_from_the_simulation_is_named(tmp_path: Path) -> None:
    cluster, trace = load_cluster(CLUSTER), load_trace(TRACE)
    # The same trace on a cycle four times as long: everything waits longer.
    write_outputs(simulate(cluster, trace, "reservation", 60.0), tmp_path / "live")
    summary = json.loads((tmp_path / "live" / "summary.json").read_text())
    summary["cycle_s"] = 15.0
    (tmp_path / "live" / "summary.json").write_text(json.dumps(summary))
    _, fig, _ = compare_dirs(None, tmp_path / "live", None, cluster=cluster, trace=trace)
    found = problems(fig, summary, Tolerance())
    assert any(p.startswith("wait_mean_s") for p in found), found


def test_compare_wants_one_simulated_side(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["replay", "compare", "--live", str(tmp_path)]) == 2
    assert "give either --sim DIR, or --cluster and --trace" in capsys.readouterr().err
    assert main(["replay", "compare", "--live", str(tmp_path), "--sim", str(tmp_path)]) == 2
    assert "cannot read" in capsys.readouterr().err
