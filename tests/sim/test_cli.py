"""`jpushare simulate` end to end: outputs, comparison, exit codes and error lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jpushare.cli import main

EXAMPLES = Path(__file__).parents[2] / "examples"
CLUSTER = str(EXAMPLES / "cluster.yaml")
TRACE = str(EXAMPLES / "trace.csv")


def test_one_policy_writes_jobs_summary_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(["simulate", "--cluster", CLUSTER, "--trace", TRACE, "--out", str(out)])
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "gpu_use.png",
        "jobs.csv",
        "lab_usage.png",
        "summary.json",
        "wait_by_gpus.png",
        "watch.png",
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy"] == "reservation"
    assert summary["placement"] == "pack"  # SPEC §1's best fit is the default
    states = summary["states"]
    # The example exercises every outcome, an OOM retry, a node failure and reservations.
    assert all(states[s] >= 1 for s in ("COMPLETED", "FAILED", "CANCELLED", "REJECTED"))
    assert summary["attempts"]["oom"] >= 2 and summary["attempts"]["node_down"] >= 1
    assert summary["reservations"]["started"] >= 3
    assert summary["watch"]["reservations"]["started"] == summary["reservations"]["started"]
    stdout = capsys.readouterr().out
    assert "reservation/pack" in stdout and "wait p95" in stdout
    assert "failed (r3+r5+cancel)" in stdout


def test_all_policies_write_one_folder_each_labelled_policy_slash_placement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cmp"
    code = main(
        ["simulate", "--cluster", CLUSTER, "--trace", TRACE, "--policy", "all", "--out", str(out)]
    )
    assert code == 0
    for policy in ("reservation", "hol-skip", "fifo", "backfill"):
        assert (out / policy / "pack" / "jobs.csv").is_file()
    rows = (out / "comparison.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows] == [
        "policy",
        "reservation/pack",
        "hol-skip/pack",
        "fifo/pack",
        "backfill/pack",
    ]
    md = (out / "comparison.md").read_text()
    assert md.startswith("| policy |")
    assert "| policy | reservations | failed (r3+r5+cancel) |" in md
    assert "| lab | reservation/pack: failed / started |" in md
    assert "reservations_failed_rate" in rows[0] and "burden_4gpu" in rows[0]
    assert (out / "wait_by_gpus.png").stat().st_size > 0
    # No reservations under hol-skip: no watch plot there.
    assert (out / "reservation" / "pack" / "watch.png").is_file()
    assert not (out / "hol-skip" / "pack" / "watch.png").exists()


def test_a_repeated_policy_runs_once_and_outputs_are_byte_identical(tmp_path: Path) -> None:
    args = ["simulate", "--cluster", CLUSTER, "--trace", TRACE, "--no-plots"]
    assert main([*args, "--policy", "fifo", "--policy", "fifo", "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--policy", "fifo", "--out", str(tmp_path / "b")]) == 0
    assert (tmp_path / "a" / "jobs.csv").read_bytes() == (tmp_path / "b" / "jobs.csv").read_bytes()


def test_both_placements_run_every_policy_each_in_its_folder(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    args = ["simulate", "--cluster", CLUSTER, "--trace", TRACE, "--no-plots", "--out", str(out)]
    placements = ["--placement", "pack", "--placement", "spread", "--placement", "pack"]
    assert main([*args, "--policy", "reservation", "--policy", "fifo", *placements]) == 0
    rows = (out / "comparison.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == [
        "reservation/pack",
        "reservation/spread",
        "fifo/pack",
        "fifo/spread",
    ]
    for label in ("reservation/pack", "reservation/spread", "fifo/pack", "fifo/spread"):
        summary = json.loads((out / label / "summary.json").read_text())
        assert f"{summary['policy']}/{summary['placement']}" == label
    # One run under spread is the same replay as the spread run of a comparison.
    single = tmp_path / "one"
    assert main([*args[:-1], str(single), "--placement", "spread"]) == 0
    assert (single / "jobs.csv").read_bytes() == (out / "reservation/spread/jobs.csv").read_bytes()


def test_an_unknown_placement_exits_2_naming_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["simulate", "--cluster", CLUSTER, "--trace", TRACE, "--placement", "tight"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--placement" in err and "'tight'" in err and "'pack', 'spread'" in err


def test_every_cycle_mode_gives_the_same_jobs_csv(tmp_path: Path) -> None:
    args = [
        "simulate",
        "--cluster",
        CLUSTER,
        "--trace",
        TRACE,
        "--no-plots",
        "--policy",
        "backfill",
    ]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--every-cycle", "--out", str(tmp_path / "b")]) == 0
    assert (tmp_path / "a" / "jobs.csv").read_bytes() == (tmp_path / "b" / "jobs.csv").read_bytes()


def test_a_bad_trace_exits_2_with_one_line_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus,lab\na,0,10,12,L\n")
    assert main(["simulate", "--cluster", CLUSTER, "--trace", str(trace)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{trace}:2: job a: num_gpus must be 1-8" in err
    assert "Traceback" not in err


def test_a_trace_naming_an_unknown_tier_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus,lab,min_tier\na,0,10,1,L,h100\n")
    assert main(["simulate", "--cluster", CLUSTER, "--trace", str(trace)]) == 2
    assert "min_tier 'h100' is not a tier of the cluster" in capsys.readouterr().err


def test_a_missing_cluster_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--cluster", str(tmp_path / "no.yaml"), "--trace", TRACE]) == 2
    err = capsys.readouterr().err
    assert "no.yaml: cannot read the cluster file" in err and err.count("\n") == 1


def test_a_non_positive_cycle_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["simulate", "--cluster", CLUSTER, "--trace", TRACE, "--cycle", "0"])
    assert info.value.code == 2
    assert "must be > 0 seconds" in capsys.readouterr().err
