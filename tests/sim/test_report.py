"""jobs.csv, summary.json and the comparison tables: exact columns, figures, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jpushare.policy.watch import percentile
from jpushare.sim.engine import simulate
from jpushare.sim.plots import lab_shares
from jpushare.sim.report import (
    JOBS_COLUMNS,
    fmt_number,
    jain_fairness,
    jobs_csv,
    summary,
    wait_stats,
    write_outputs,
)
from tests.sim.builders import cluster, job, random_case


def test_jobs_csv_has_the_issue_columns_and_one_row_per_trace_job_in_trace_order() -> None:
    c = cluster(("n1", {"mid": 2}))
    result = simulate(
        c,
        [
            job("z", 0, 100, 2, lab="A"),
            job("big", 1, 10, 8),
            job("a", 2, 10.25, 1, lab="B", cancel=400),
            job("q", 3, 10, 1, cancel=50),
        ],
    )
    lines = jobs_csv(result).splitlines()
    assert lines[0] == (
        "job_id,lab,num_gpus,state,submit_time,start_time,end_time,node,tier,wait_s,"
        "attempts,run_cost,reservation_cost"
    )
    assert tuple(lines[0].split(",")) == JOBS_COLUMNS
    assert lines[1:] == [
        "z,A,2,COMPLETED,0,0,100,n1,mid,0,1,4000,0",
        "big,L,8,REJECTED,1,,,,,,0,0,0",
        "a,B,1,COMPLETED,2,100,110.25,n1,mid,98,1,205,0",
        "q,L,1,CANCELLED,3,,,,,,0,0,0",
    ]


def test_numbers_are_written_compactly_and_reproducibly() -> None:
    assert [fmt_number(x) for x in (None, 3, 3.0, 2.5, 1 / 3, 1e9, 0.0004)] == [
        "",
        "3",
        "3",
        "2.5",
        "0.333",
        "1000000000",
        "0",
    ]


def test_wait_statistics_interpolate_percentiles_like_numpy() -> None:
    assert percentile([0.0, 10.0], 50) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)
    assert wait_stats([5.0, 1.0, 3.0]) == {
        "count": 3,
        "mean": 3.0,
        "p50": 3.0,
        "p95": 4.8,
        "p99": 4.96,
        "max": 5.0,
    }
    assert wait_stats([])["mean"] is None


def test_utilization_counts_running_gpu_seconds_over_capacity_from_first_submit_to_last_end() -> (
    None
):
    c = cluster(("n1", {"mid": 2}))
    s = summary(simulate(c, [job("a", 0, 100, 1), job("b", 50, 50, 1)]))
    # 100 + 50 GPU-seconds over 2 GPUs x 100 s.
    assert s["gpu_utilization"] == 0.75
    assert s["makespan_s"] == 100.0
    assert s["wait_s_by_gpus"]["1"]["max"] == 0.0


def test_the_summary_counts_reservations_by_how_they_ended() -> None:
    c = cluster(("n1", {"mid": 4}))
    s = summary(simulate(c, [job("a", 0, 100, 2), job("b", 0, 10, 4, cancel=62)]))
    assert s["reservations"] == {
        "started": 1,
        "ended": {"filled": 0, "swap": 0, "r3": 0, "r5": 0, "cancel": 1},
        "held_at_end": 0,
        "mean_hold_s": 62.0,  # from t=0 (SPEC decision 7) to the cancel
    }
    assert s["reserved_fraction"] == pytest.approx(2 * 62 / (4 * 100))
    assert s["states"] == {"COMPLETED": 1, "FAILED": 0, "CANCELLED": 1, "REJECTED": 0}
    for key in ("policy", "jobs", "makespan_s", "wait_s", "lab_usage", "jain_fairness", "wall_s"):
        assert key in s


def test_the_watch_list_counts_a_cancelled_reservation_as_failed_and_its_cost_as_burden() -> None:
    c = cluster(("n1", {"mid": 4}))
    w = summary(simulate(c, [job("a", 0, 100, 2, lab="A"), job("b", 0, 10, 4, "B", cancel=62)]))[
        "watch"
    ]
    # b reserves the two GPUs a leaves idle from t=0 (decision 7); its cancel at 62 s
    # releases them.
    assert w["reservations"]["failed"] == 1 and w["reservations"]["failed_rate"] == 1.0
    assert w["reservations_by_lab"] == {"B": w["reservations"]}
    assert w["hold_s"] == {"count": 1, "mean": 62.0, "p95": 62.0, "max": 62.0}
    held = 2 * 62 * 20.0  # mid = 20 TFLOPS
    run = 2 * 100 * 20.0
    assert w["usage"] == {
        "ended_jobs": 2,
        "charged_tflop_s": run + held,
        "reservation_tflop_s": held,
        "reservation_share": round(held / (run + held), 6),
    }
    assert w["by_gpus"]["2"]["burden"] == 1.0 and w["by_gpus"]["2"]["mean_wait_s"] == 0.0
    # b never ran: it paid for its reservation, but a burden needs a run to compare with.
    assert w["by_gpus"]["4"] == {
        "jobs": 1,
        "run_tflop_s": 0.0,
        "reservation_tflop_s": held,
        "charged_tflop_s": held,
        "burden": None,
        "started": 0,
        "mean_wait_s": None,
    }


def test_lab_shares_sum_to_one_after_every_bill() -> None:
    c = cluster(("n1", {"mid": 1}), labs={"A": 100.0, "B": 0.0})
    times, shares = lab_shares(simulate(c, [job("b", 0, 10, lab="B"), job("a", 0, 5, lab="A")]))
    # t=0: A has all of its starting 100. B runs first (less usage) 0-10 s: 200 billed at
    # 10; A runs 10-15 s: 100 more at 15.
    assert times == [0.0, 10.0, 15.0]
    assert shares["A"] == pytest.approx([1.0, 100 / 300, 200 / 400])
    assert shares["B"] == pytest.approx([0.0, 200 / 300, 200 / 400])


def test_jain_fairness_is_one_when_labs_wait_alike_and_lower_when_one_waits() -> None:
    c = cluster(("n1", {"mid": 1}), ("n2", {"mid": 1}))
    even = simulate(c, [job("a", 0, 100, lab="A"), job("b", 0, 100, lab="B")])
    assert jain_fairness(even) == 1.0
    # B's job waits 100 s for a 100 s run: run fraction 0.5 against A's 1.0.
    one = cluster(("n1", {"mid": 1}))
    uneven = simulate(one, [job("a", 0, 100, lab="A"), job("b", 0, 100, lab="B")])
    assert jain_fairness(uneven) == pytest.approx(1.5**2 / (2 * (1 + 0.25)))


def test_two_runs_write_byte_identical_jobs_csv_and_the_same_summary(tmp_path: Path) -> None:
    c, jobs = random_case(11)
    first = write_outputs(simulate(c, jobs, "reservation"), tmp_path / "one")
    second = write_outputs(simulate(c, jobs, "reservation"), tmp_path / "two")
    a = (tmp_path / "one" / "jobs.csv").read_bytes()
    assert a == (tmp_path / "two" / "jobs.csv").read_bytes()
    assert len(a.splitlines()) == len(jobs) + 1
    first.pop("wall_s")
    second.pop("wall_s")
    assert first == second
    on_disk = json.loads((tmp_path / "one" / "summary.json").read_text())
    on_disk.pop("wall_s")
    assert on_disk == first
