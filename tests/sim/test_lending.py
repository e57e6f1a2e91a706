"""The lending option in the simulator (`--reserved-gpus lend-by-limit`), hand-worked on
one 4-GPU placement (tier `mid`, 20 TFLOPS): r2 (2 GPUs, limit 600 s) and r1 (1 GPU, limit
1200 s) start at t=0; top job A (3 GPUs) reserves the last idle GPU; B (1 GPU) is below it.
The reservation's projected fill is 600 s (r2's limit)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from jpushare.cli import main
from jpushare.formats.trace_file import TraceJob
from jpushare.policy.watch import LentRun, LentWait, lending_figures
from jpushare.sim.engine import simulate
from jpushare.sim.results import AttemptEnd, SimResult, TraceJobResult, TraceJobState
from tests.sim.builders import cluster, job, random_case

TFLOPS = 20.0
C = cluster(("n1", {"mid": 4}))


def trace(b_run: float, b_limit: float, r2_run: float = 600.0) -> list[TraceJob]:
    return [
        job("r2", 0, r2_run, 2, time_limit=600.0),
        job("r1", 0, 1200, 1, time_limit=1200.0),
        job("A", 1, 100, 3, time_limit=100.0),
        job("B", 2, b_run, 1, time_limit=b_limit),
    ]


def by_id(result: SimResult) -> dict[str, TraceJobResult]:
    return {j.job_id: j for j in result.jobs}


def start(j: TraceJobResult) -> float:
    assert j.first_start is not None
    return j.first_start


def test_a_job_ending_before_the_fill_runs_on_the_reserved_gpu_and_pays_for_it_once() -> None:
    lend = simulate(C, trace(200, 300), reserved_gpus="lend-by-limit", cycle_s=5.0)
    jobs = by_id(lend)
    # A reserved the idle GPU at t=5 (its submission cycle); B borrowed it at t=5 too.
    assert start(jobs["B"]) == 5.0
    assert jobs["B"].attempts[0].end == 205.0
    assert start(jobs["A"]) == 600.0  # at its projected fill, not later
    # B's 200 GPU-s are its run cost; A's reservation pays 1 GPU for 5..600 less B's loan.
    assert jobs["B"].run_cost == pytest.approx(200 * TFLOPS)
    assert jobs["A"].reservation_cost == pytest.approx((595 - 200) * TFLOPS)
    assert lend.lent_runs == (LentRun("B", "A", 1, 5.0, 205.0),)
    assert lend.lent_gpu_s == pytest.approx(200.0)
    assert lend.reserved_gpu_s == pytest.approx(395.0)
    assert lend.lent_waits == ()
    # Usage conservation holds with loans (SPEC §4: billed once, when each job ends).
    used = sum(lend.lab_usage.values()) - sum(lend.initial_lab_usage.values())
    assert used == pytest.approx(sum(j.billed for j in lend.jobs))

    # R4, the default: B waits for A; A's reservation pays its GPU the whole time.
    r4 = by_id(simulate(C, trace(200, 300), cycle_s=5.0))
    assert start(r4["A"]) == 600.0 and start(r4["B"]) > 600.0
    assert r4["A"].reservation_cost == pytest.approx(595 * TFLOPS)


def test_a_job_whose_limit_ends_after_the_fill_does_not_borrow() -> None:
    jobs = by_id(simulate(C, trace(200, 900), reserved_gpus="lend-by-limit"))
    assert start(jobs["B"]) > start(jobs["A"])


def test_the_top_job_waits_for_its_lent_gpu_and_the_wait_is_counted() -> None:
    """r2 ends early (t=300): A holds all its GPUs but B's lent one until B ends at 505."""
    r = simulate(C, trace(500, 550, r2_run=300), reserved_gpus="lend-by-limit")
    jobs = by_id(r)
    assert start(jobs["A"]) == 505.0
    assert r.lent_waits == (LentWait("A", 300.0, 505.0),)
    # 5..300: its one GPU lent (0 reserved); 300..505: 3 held, 1 lent.
    assert jobs["A"].reservation_cost == pytest.approx(2 * 205 * TFLOPS)
    figures = lending_figures(r.lent_runs, r.lent_waits)
    assert (figures.loans, figures.waits, figures.wait_total_s) == (1, 1, 205.0)
    assert figures.lent_gpu_hours == pytest.approx(500 / 3600)


def test_a_lent_run_is_stopped_at_its_time_limit() -> None:
    """B's limit (300 s) is shorter than its run: the service would stop it there."""
    jobs = by_id(simulate(C, trace(1000, 300), reserved_gpus="lend-by-limit"))
    b = jobs["B"]
    assert b.state is TraceJobState.FAILED and b.reason.startswith("time limit")
    assert [(a.start, a.end, a.outcome) for a in b.attempts] == [
        (5.0, 305.0, AttemptEnd.TIME_LIMIT)
    ]
    assert start(jobs["A"]) == 600.0


SEEDS = range(40)


def test_the_random_cases_below_do_lend() -> None:
    loans = [len(simulate(*random_case(s), reserved_gpus="lend-by-limit").lent_runs) for s in SEEDS]
    assert sum(1 for n in loans if n) >= 5


@pytest.mark.parametrize("seed", SEEDS)
def test_lending_keeps_cycle_skipping_exact_and_usage_conserved(seed: int) -> None:
    c, jobs = random_case(seed)
    skip = simulate(c, jobs, reserved_gpus="lend-by-limit")
    every = simulate(c, jobs, reserved_gpus="lend-by-limit", every_cycle=True)
    assert skip == replace(every, cycles_run=skip.cycles_run)
    used = sum(skip.lab_usage.values()) - sum(skip.initial_lab_usage.values())
    assert used == pytest.approx(sum(j.billed for j in skip.jobs), rel=1e-9, abs=1e-6)
    for j in skip.jobs:
        if j.state in (TraceJobState.COMPLETED, TraceJobState.FAILED, TraceJobState.CANCELLED):
            assert j.billed == pytest.approx(j.run_cost + j.reservation_cost)
    for sample in skip.gpu_timeline:  # a lent GPU is running, not also reserved
        assert sample.running + sample.reserved <= c.capacity_gpus


def test_simulate_cli_reports_the_mode_and_the_lending_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = ["job_id,submit_time,duration,num_gpus,lab,min_tier,cancel_time,oom_on,time_limit"]
    rows += [
        f"{j.job_id},{j.submit_time},{j.duration},{j.num_gpus},L,,,,{j.time_limit}"
        for j in trace(200, 300)
    ]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "c.yaml").write_text(
        "tiers:\n  - {name: mid, tflops: 20, sort_order: 20}\n"
        "nodes:\n  - {name: n1, gpus: {mid: 4}}\n"
    )
    out = tmp_path / "out"
    argv = ["simulate", "--cluster", str(tmp_path / "c.yaml"), "--trace", str(tmp_path / "t.csv")]
    assert main([*argv, "--reserved-gpus", "lend-by-limit", "--out", str(out), "--no-plots"]) == 0
    text = capsys.readouterr().out
    assert "reserved GPUs lend-by-limit" in text and "lent GPU-h" in text
    doc = json.loads((out / "summary.json").read_text())
    assert doc["reserved_gpus"] == "lend-by-limit"
    assert doc["lending"]["loans"] == 1
    assert doc["lending"]["lent_gpu_hours"] == round(200 / 3600, 3)
    with pytest.raises(SystemExit) as info:
        main([*argv, "--reserved-gpus", "borrow"])
    assert info.value.code == 2 and "lend-by-limit" in capsys.readouterr().err
