"""The Alibaba openb loader on the shipped pod list: counts follow from the documented rules.

Expected values are computed here straight from the raw CSV with the csv module.
"""

from __future__ import annotations

import csv
import zlib
from collections import Counter
from pathlib import Path

import pytest

from jpushare.traces import DAY_S, LoadReport, TraceRow
from jpushare.traces.alibaba import (
    AlibabaOptions,
    alibaba_lab,
    convert_alibaba,
    load_alibaba,
    parse_alibaba_pods,
    read_alibaba_pods,
    spec_to_min_tier,
)


def raw_pods(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_pending_and_gpu_less_pods_are_dropped_and_counted(alibaba_pods_csv: Path) -> None:
    raw = raw_pods(alibaba_pods_csv)
    pending = [r for r in raw if r["scheduled_time"] == ""]
    assert len(pending) == sum(1 for r in raw if r["pod_phase"] == "Pending") == 897
    ran = [r for r in raw if r["scheduled_time"] != ""]
    gpu_less = [r for r in ran if int(r["num_gpu"]) == 0]
    kept = [r for r in ran if int(r["num_gpu"]) > 0]
    rows, report = load_alibaba(alibaba_pods_csv)
    assert report.read == len(raw) == 8152
    assert report.dropped == Counter(
        {
            "Pending (never scheduled, no times)": len(pending),
            "no GPU (CPU-only pod)": len(gpu_less),
        }
    )
    assert report.kept == len(rows) == len(kept)
    assert report.read == report.kept + report.total_dropped


def test_fractional_pods_become_one_whole_gpu_or_are_dropped(alibaba_pods_csv: Path) -> None:
    raw = raw_pods(alibaba_pods_csv)
    fractional = [
        r
        for r in raw
        if r["scheduled_time"] != "" and r["num_gpu"] == "1" and int(r["gpu_milli"]) < 1000
    ]
    rows, report = load_alibaba(alibaba_pods_csv)
    assert report.adjusted["fractional GPU rounded up to 1 whole GPU"] == len(fractional)
    names = {r["name"] for r in fractional}
    assert all(r.num_gpus == 1 for r in rows if r.job_id in names)
    dropped_rows, dropping = load_alibaba(alibaba_pods_csv, AlibabaOptions(fractional="drop"))
    assert dropping.dropped["fractional GPU (gpu_milli < 1000)"] == len(fractional)
    assert len(dropped_rows) == len(rows) - len(fractional)


def test_durations_submits_and_gpu_counts_come_from_the_raw_rows(alibaba_pods_csv: Path) -> None:
    raw = raw_pods(alibaba_pods_csv)
    kept = [r for r in raw if r["scheduled_time"] != "" and int(r["num_gpu"]) > 0]
    origin = min(int(r["creation_time"]) for r in kept)
    rows, report = load_alibaba(alibaba_pods_csv)
    assert [r.job_id for r in rows] == [r["name"] for r in kept]
    assert [r.duration for r in rows] == [
        int(r["deletion_time"]) - int(r["scheduled_time"]) for r in kept
    ]
    assert [r.submit_time for r in rows] == [int(r["creation_time"]) - origin for r in kept]
    assert Counter(r.num_gpus for r in rows) == Counter(int(r["num_gpu"]) for r in kept)
    running = sum(1 for r in kept if r["pod_phase"] == "Running")
    assert report.adjusted["Running: duration cut at the snapshot (lower bound)"] == running
    assert all(r.min_tier is None for r in rows)  # the default list has no gpu_spec


def test_labs_are_a_crc32_hash_of_the_pod_name(alibaba_pods_csv: Path) -> None:
    rows, _ = load_alibaba(alibaba_pods_csv)
    assert all(r.lab == f"lab{zlib.crc32(r.job_id.encode()) % 6}" for r in rows)
    assert len({r.lab for r in rows}) == 6
    again, _ = load_alibaba(alibaba_pods_csv)
    assert again == rows
    by_qos, _ = load_alibaba(alibaba_pods_csv, AlibabaOptions(lab_by="qos"))
    raw = {r["name"]: r["qos"].lower() for r in raw_pods(alibaba_pods_csv)}
    assert all(r.lab == raw[r.job_id] for r in by_qos)


def test_window_drops_early_pods_and_rebases(alibaba_pods_csv: Path) -> None:
    raw = raw_pods(alibaba_pods_csv)
    last = max(int(r["creation_time"]) for r in raw)
    start = last - 35 * DAY_S
    ran = [r for r in raw if r["scheduled_time"] != ""]
    early = [r for r in ran if int(r["creation_time"]) < start]
    inside = [r for r in ran if int(r["creation_time"]) >= start and int(r["num_gpu"]) > 0]
    rows, report = load_alibaba(alibaba_pods_csv, AlibabaOptions(window_s=35 * DAY_S))
    assert report.dropped["created before the window"] == len(early)
    assert report.kept == len(inside)
    assert rows[0].submit_time == 0
    carried_rows, carried = load_alibaba(
        alibaba_pods_csv, AlibabaOptions(window_s=35 * DAY_S, carry_over=True)
    )
    still = [
        r
        for r in early
        if int(r["num_gpu"]) > 0
        and int(r["creation_time"]) + int(r["deletion_time"]) - int(r["scheduled_time"]) > start
    ]
    assert carried.kept == len(inside) + len(still)
    assert sum(1 for r in carried_rows if r.submit_time == 0) >= len(still)


def test_gpu_spec_maps_to_the_weakest_listed_model() -> None:
    assert spec_to_min_tier("V100M16|V100M32") == "v100m16"
    assert spec_to_min_tier("G2|T4") == "t4"
    assert spec_to_min_tier("A10") == "a10"
    assert spec_to_min_tier("H100") is None


def test_small_text_with_a_gpu_spec_and_every_drop_reason() -> None:
    text = [
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n",
        "a,1,1,2,1000,V100M16|V100M32,LS,Succeeded,10,100,20\n",
        "b,1,1,1,500,,BE,Running,12,50,12\n",
        "c,1,1,0,0,,BE,Running,13,50,13\n",
        "d,1,1,1,1000,,BE,Pending,14,,\n",
        "e,1,1,1,1000,H100,LS,Failed,15,15,15\n",
        "f,1,1,1,1000,H100,LS,Failed,16,30,16\n",
    ]
    rows, report = load_alibaba_text(text)
    assert [(r.job_id, r.submit_time, r.duration, r.num_gpus, r.min_tier) for r in rows] == [
        ("a", 0, 80, 2, "v100m16"),
        ("b", 2, 38, 1, None),
        ("f", 6, 14, 1, None),
    ]
    assert report.dropped == Counter(
        {
            "no GPU (CPU-only pod)": 1,
            "Pending (never scheduled, no times)": 1,
            "duration <= 0": 1,
        }
    )
    assert report.adjusted["gpu_spec names no known model: min_tier empty"] == 1


def load_alibaba_text(text: list[str]) -> tuple[list[TraceRow], LoadReport]:
    return convert_alibaba(parse_alibaba_pods(text))


def test_alibaba_lab_rejects_zero_labs(alibaba_pods_csv: Path) -> None:
    pod = read_alibaba_pods(alibaba_pods_csv)[0]
    with pytest.raises(ValueError):
        alibaba_lab(pod, "hash", 0)
