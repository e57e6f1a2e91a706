"""Example clusters: the generators, the shipped YAML files, and the round trip of the
converted traces through the simulator's own trace and cluster readers (when present)."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest
import yaml

from jpushare.formats.cluster_file import load_cluster
from jpushare.formats.trace_file import check_tiers, parse_trace
from jpushare.traces import DAY_S, format_trace
from jpushare.traces.alibaba import TIER_BY_MODEL, AlibabaOptions, load_alibaba
from jpushare.traces.clusters import (
    alibaba_cluster,
    cluster_gpus,
    cluster_yaml,
    philly_cluster,
    read_alibaba_nodes,
)
from jpushare.traces.philly import PhillyOptions, load_philly

from .conftest import EXAMPLES


def test_philly_cluster_is_mostly_8_gpu_nodes_of_the_project_tiers() -> None:
    spec = philly_cluster()
    assert spec.gpus == 1024
    per_node = Counter(sum(n.gpus.values()) for n in spec.nodes)
    assert per_node[8] * 8 >= 0.8 * spec.gpus
    assert {t.name for t in spec.tiers} == {"rtx3080ti", "rtx4090", "rtx5090"}
    assert len({n.name for n in spec.nodes}) == len(spec.nodes)
    assert philly_cluster(scale=0.5).gpus == 512


def test_alibaba_full_cluster_is_the_whole_node_list(alibaba_nodes_csv: Path) -> None:
    with alibaba_nodes_csv.open(newline="") as f:
        raw = [r for r in csv.DictReader(f) if int(r["gpu"]) > 0]
    nodes = read_alibaba_nodes(alibaba_nodes_csv)
    full = alibaba_cluster(nodes, every=1)
    assert len(full.nodes) == len(raw) == 1213
    assert full.gpus == sum(int(r["gpu"]) for r in raw) == 6212
    expected = Counter()  # type: Counter[str]
    for r in raw:
        expected[TIER_BY_MODEL[r["model"].upper()].name] += int(r["gpu"])
    assert full.gpus_by_tier() == dict(expected)


def test_alibaba_sample_takes_every_nth_node_in_serial_order(alibaba_nodes_csv: Path) -> None:
    nodes = read_alibaba_nodes(alibaba_nodes_csv)
    sample = alibaba_cluster(nodes, every=64)
    ordered = sorted(n.sn for n in nodes)
    assert [n.name for n in sample.nodes] == ordered[::64]
    with pytest.raises(ValueError):
        alibaba_cluster(nodes, every=0)


def test_cluster_yaml_round_trips_through_yaml() -> None:
    spec = philly_cluster(scale=0.1)
    text = cluster_yaml(spec, ["hello"])
    data = yaml.safe_load(text)
    assert text.startswith("# hello\n")
    assert [t["name"] for t in data["tiers"]] == [t.name for t in spec.tiers]
    assert cluster_gpus(text) == spec.gpus
    assert all(
        set(t) == {"name", "tflops", "sort_order", "max_gpus", "auto_assign"} for t in data["tiers"]
    )


@pytest.mark.parametrize("name", ["philly-cluster.yaml", "alibaba-cluster.yaml"])
def test_shipped_example_clusters_have_8_gpu_nodes(name: str) -> None:
    data = yaml.safe_load((EXAMPLES / name).read_text())
    tiers = {t["name"] for t in data["tiers"]}
    assert any(max(n["gpus"].values()) == 8 for n in data["nodes"])
    assert all(set(n["gpus"]) <= tiers for n in data["nodes"])


def test_shipped_philly_cluster_matches_its_generator() -> None:
    text = (EXAMPLES / "philly-cluster.yaml").read_text()
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert body == cluster_yaml(philly_cluster()).splitlines()


def test_converted_traces_round_trip_through_the_simulator_reader(
    philly_csv: Path, alibaba_pods_csv: Path
) -> None:

    cases = [
        (load_philly(philly_csv, PhillyOptions(window_s=10 * DAY_S))[0], "philly-cluster.yaml"),
        (load_alibaba(alibaba_pods_csv, AlibabaOptions())[0], "alibaba-cluster.yaml"),
    ]
    for rows, cluster_name in cases:
        jobs = parse_trace(format_trace(rows), "converted")
        assert len(jobs) == len(rows)
        for job, row in zip(jobs, rows, strict=True):
            assert (job.job_id, job.submit_time, job.duration, job.num_gpus, job.lab) == (
                row.job_id,
                row.submit_time,
                row.duration,
                row.num_gpus,
                row.lab,
            )
            assert job.time_limit == row.time_limit
            assert job.cancel_time == row.cancel_time
            assert job.min_tier == row.min_tier
        cluster = load_cluster(EXAMPLES / cluster_name)
        check_tiers(jobs, cluster.tiers, "converted")
