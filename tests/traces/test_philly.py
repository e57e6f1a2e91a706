"""The Philly loader on the shipped file: counts follow from the documented rules.

Expected values are computed here straight from the raw CSV with the csv module, not
copied from the loader's output.
"""

from __future__ import annotations

import csv
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from jpushare.traces import DAY_S, HOUR_S
from jpushare.traces.philly import (
    PhillyOptions,
    convert_philly,
    load_philly,
    parse_philly,
    philly_labs,
    read_philly,
)


def raw_rows(path: Path) -> list[dict[str, Any]]:
    """The raw rows with their absolute submit time (running sum of `interval`)."""
    with path.open(newline="") as f:
        rows: list[dict[str, Any]] = list(csv.DictReader(f))
    clock = 0
    for r in rows:
        clock += int(r["interval"])
        r["submit"] = clock
    return rows


def test_the_whole_file_keeps_every_job_of_at_most_8_gpus(philly_csv: Path) -> None:
    raw = raw_rows(philly_csv)
    over8 = sum(1 for r in raw if int(r["gpu_num"]) > 8)
    rows, report = load_philly(philly_csv)
    assert report.read == len(raw) == 15_000
    assert report.dropped == Counter({"over 8 GPUs (multi-node)": over8})
    assert over8 == 280  # as the shared README says
    assert report.kept == len(rows) == 15_000 - over8
    assert report.read == report.kept + report.total_dropped


def test_multi_node_jobs_of_at_most_8_gpus_are_kept_on_one_node(philly_csv: Path) -> None:
    raw = raw_rows(philly_csv)
    spread = sum(1 for r in raw if int(r["gpu_num"]) <= 8 and int(r["node_num"]) > 1)
    _, report = load_philly(philly_csv)
    assert report.adjusted["multi-node, <= 8 GPUs: kept on one node"] == spread == 160
    _, dropping = load_philly(philly_csv, PhillyOptions(multi_node="drop"))
    assert dropping.dropped["multi-node, <= 8 GPUs"] == spread


def test_clamping_keeps_big_jobs_as_8_gpu_jobs(philly_csv: Path) -> None:
    rows, report = load_philly(philly_csv, PhillyOptions(over8="clamp"))
    assert report.kept == 15_000
    assert report.adjusted["over 8 GPUs clamped to 8"] == 280
    assert max(r.num_gpus for r in rows) == 8


def test_gpu_counts_durations_and_ids_come_from_the_raw_rows(philly_csv: Path) -> None:
    raw = raw_rows(philly_csv)
    kept = [r for r in raw if int(r["gpu_num"]) <= 8]
    rows, _ = load_philly(philly_csv)
    assert Counter(r.num_gpus for r in rows) == Counter(int(r["gpu_num"]) for r in kept)
    assert [r.duration for r in rows] == [int(r["run_time"]) for r in kept]
    assert [r.job_id for r in rows] == [f"p{int(r['u_id']):05d}" for r in kept]
    # Rebased: first kept job at 0, gaps as in the file.
    origin = kept[0]["submit"]
    assert [r.submit_time for r in rows] == [r["submit"] - origin for r in kept]
    assert rows[0].submit_time == 0


def test_killed_jobs_are_plain_durations_by_default(philly_csv: Path) -> None:
    raw = raw_rows(philly_csv)
    killed = [r for r in raw if r["new_status"] == "Killed" and int(r["gpu_num"]) <= 8]
    rows, report = load_philly(philly_csv)
    assert report.adjusted["Killed: kept as a plain duration"] == len(killed)
    assert all(r.cancel_time is None for r in rows)


def test_killed_jobs_can_be_cancels_at_submit_plus_run_time(philly_csv: Path) -> None:
    raw = raw_rows(philly_csv)
    kept = [r for r in raw if int(r["gpu_num"]) <= 8]
    origin = kept[0]["submit"]
    rows, _ = load_philly(philly_csv, PhillyOptions(killed="cancel"))
    by_id = {r.job_id: r for r in rows}
    for r in kept:
        row = by_id[f"p{int(r['u_id']):05d}"]
        if r["new_status"] == "Killed":
            assert row.cancel_time == r["submit"] - origin + int(r["run_time"])
        else:
            assert row.cancel_time is None


def test_time_limit_is_the_duration_rounded_up_to_whole_hours(philly_csv: Path) -> None:
    rows, _ = load_philly(philly_csv)
    for r in rows:
        assert r.time_limit is not None
        assert r.time_limit >= r.duration
        assert r.time_limit % HOUR_S == 0
        assert r.time_limit - r.duration < HOUR_S or r.time_limit == HOUR_S
    none_rows, _ = load_philly(philly_csv, PhillyOptions(time_limit="none"))
    assert all(r.time_limit is None for r in none_rows)


def test_last_10_days_window_counts_and_rebases(philly_csv: Path) -> None:
    raw = raw_rows(philly_csv)
    last = raw[-1]["submit"]
    start = last - 10 * DAY_S
    before = [r for r in raw if r["submit"] < start]
    inside = [r for r in raw if r["submit"] >= start]
    inside_over8 = [r for r in inside if int(r["gpu_num"]) > 8]
    kept = [r for r in inside if int(r["gpu_num"]) <= 8]
    rows, report = load_philly(philly_csv, PhillyOptions(window_s=10 * DAY_S))
    assert report.dropped["submitted before the window"] == len(before)
    assert report.dropped["over 8 GPUs (multi-node)"] == len(inside_over8)
    assert report.kept == len(rows) == len(kept)
    assert len(inside) > 14_000  # the dense part holds ~14k jobs
    assert rows[0].submit_time == 0
    assert max(r.submit_time for r in rows) == last - kept[0]["submit"]
    assert max(r.submit_time for r in rows) <= 10 * DAY_S
    assert Counter(r.num_gpus for r in rows)[8] == sum(1 for r in kept if r["gpu_num"] == "8")


def test_carry_over_brings_in_jobs_still_running_at_the_window_start(philly_csv: Path) -> None:
    raw = raw_rows(philly_csv)
    start = raw[-1]["submit"] - 10 * DAY_S
    running = [
        r
        for r in raw
        if r["submit"] < start
        and r["submit"] + int(r["run_time"]) > start
        and int(r["gpu_num"]) <= 8
    ]
    rows, report = load_philly(philly_csv, PhillyOptions(window_s=10 * DAY_S, carry_over=True))
    carried = [r for r in rows if r.job_id in {f"p{int(x['u_id']):05d}" for x in running}]
    assert report.adjusted["running at the window start: carried over, remaining duration"] == len(
        running
    )
    assert len(carried) == len(running) > 0
    assert all(r.submit_time == 0 for r in carried)
    remaining = {
        f"p{int(x['u_id']):05d}": x["submit"] + int(x["run_time"]) - start for x in running
    }
    assert all(r.duration == remaining[r.job_id] for r in carried)


def test_labs_top_users_get_their_own_lab_and_the_rest_share_hashed_labs(
    philly_csv: Path,
) -> None:
    raw = raw_rows(philly_csv)
    counts = Counter(r["user"] for r in raw)
    top8 = sorted(counts, key=lambda u: (-counts[u], int(u)))[:8]
    labs = philly_labs(read_philly(philly_csv))
    for user in counts:
        if user in top8:
            assert labs[user] == f"u{user}"
        else:
            assert labs[user] == f"grp{zlib.crc32(user.encode()) % 4}"
    assert len(set(labs.values())) == 12
    # the two busiest users of the README
    assert {"47", "10"} <= set(top8)


def test_lab_assignment_is_deterministic_and_window_independent(philly_csv: Path) -> None:
    jobs = read_philly(philly_csv)
    assert philly_labs(jobs) == philly_labs(list(jobs))
    full, _ = convert_philly(jobs)
    window, _ = convert_philly(jobs, PhillyOptions(window_s=10 * DAY_S))
    lab_full = {r.job_id: r.lab for r in full}
    assert all(lab_full[r.job_id] == r.lab for r in window)
    again, _ = convert_philly(read_philly(philly_csv), PhillyOptions(window_s=10 * DAY_S))
    assert again == window


def test_parse_rejects_a_file_that_is_not_philly() -> None:
    with pytest.raises(ValueError, match="missing columns"):
        parse_philly(["a,b,c\n", "1,2,3\n"])


def test_parse_small_text() -> None:
    text = [
        "u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status\n",
        "0,7,1,0,1,0,100,0,Pass\n",
        "1,7,16,0,2,50,100,0,Pass\n",
        "2,9,4,0,1,25,30,0,Killed\n",
    ]
    rows, report = convert_philly(parse_philly(text), PhillyOptions(top_users=1, other_labs=1))
    assert [(r.job_id, r.submit_time, r.num_gpus, r.lab) for r in rows] == [
        ("p00000", 0, 1, "u7"),
        ("p00002", 75, 4, "grp0"),
    ]
    assert report.dropped == Counter({"over 8 GPUs (multi-node)": 1})
