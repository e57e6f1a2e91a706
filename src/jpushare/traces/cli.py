"""`jpushare trace …`: convert the real traces to TRACE.csv and write example clusters.

    jpushare trace philly  [--in CSV] --out TRACE.csv [--window last10d] [options]
    jpushare trace alibaba [--in CSV] --out TRACE.csv [--window last35d] [options]
    jpushare trace cluster philly  --out CLUSTER.yaml [--scale 1.0]
    jpushare trace cluster alibaba [--nodes CSV] --out CLUSTER.yaml [--every 64]

The conversion rules are those of `jpushare.traces.philly` / `.alibaba` (see their
docstrings and data/traces/README.md). Counts (read, kept, dropped by reason, adjusted by
note) go to stderr; with `--cluster CLUSTER.yaml` the offered load on that cluster too.
Registered by `register(subparsers)`, like every sub-command module of `jpushare.cli`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from jpushare.traces import LoadReport, TraceRow, offered_load, parse_window, write_trace
from jpushare.traces.alibaba import AlibabaOptions, load_alibaba
from jpushare.traces.clusters import (
    alibaba_cluster,
    cluster_gpus,
    cluster_yaml,
    philly_cluster,
    read_alibaba_nodes,
)
from jpushare.traces.philly import PhillyOptions, load_philly

DEFAULT_PHILLY = "data/traces/philly_dirlab_15k/philly_data_training.csv"
DEFAULT_ALIBABA_PODS = "data/traces/alibaba_openb_2023/openb_pod_list_default.csv"
DEFAULT_ALIBABA_NODES = "data/traces/alibaba_openb_2023/openb_node_list_gpu_node.csv"


def _window(text: str) -> int | None:
    try:
        return parse_window(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def _common(parser: argparse.ArgumentParser, default_in: str, default_window: str) -> None:
    parser.add_argument(
        "--in", dest="input", default=default_in, help=f"raw trace CSV (default {default_in})"
    )
    parser.add_argument("--out", required=True, help="TRACE.csv to write")
    parser.add_argument(
        "--window",
        type=_window,
        default=_window(default_window),
        metavar="all|last<N>d",
        help=f"keep jobs submitted in the trace's last N days, rebased to 0 "
        f"(default {default_window})",
    )
    parser.add_argument(
        "--carry-over",
        action="store_true",
        help="with --window: jobs submitted before the window and still running when it "
        "opens enter at t=0 with their remaining duration",
    )
    parser.add_argument(
        "--time-limit",
        choices=("hour", "none"),
        default="hour",
        help="time_limit column: duration rounded up to whole hours (>= 1 h), or empty",
    )
    parser.add_argument("--cluster", help="CLUSTER.yaml: also print the offered load on its GPUs")


def register(subparsers: Any) -> None:
    """Add `trace` and its sub-commands to the `jpushare` parser."""
    trace = subparsers.add_parser(
        "trace",
        help="convert a real trace (philly, alibaba) to TRACE.csv; write example clusters",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    kinds = trace.add_subparsers(dest="trace_kind", required=True, metavar="KIND")

    philly = kinds.add_parser("philly", help="Microsoft Philly (DIR-LAB 15k subset)")
    _common(philly, DEFAULT_PHILLY, "all")
    philly.add_argument("--top-users", type=int, default=8, help="users with a lab of their own")
    philly.add_argument(
        "--other-labs", type=_positive_int, default=4, help="labs the other users are hashed into"
    )
    philly.add_argument("--over-8", choices=("drop", "clamp"), default="drop")
    philly.add_argument("--multi-node", choices=("keep", "drop"), default="keep")
    philly.add_argument("--killed", choices=("duration", "cancel"), default="duration")
    philly.set_defaults(func=run_philly)

    alibaba = kinds.add_parser("alibaba", help="Alibaba openb GPU pods (2023)")
    _common(alibaba, DEFAULT_ALIBABA_PODS, "all")
    alibaba.add_argument("--labs", type=_positive_int, default=6, help="labs for --lab-by hash")
    alibaba.add_argument("--lab-by", choices=("hash", "qos"), default="hash")
    alibaba.add_argument("--fractional", choices=("whole", "drop"), default="whole")
    alibaba.set_defaults(func=run_alibaba)

    cluster = kinds.add_parser("cluster", help="write an example CLUSTER.yaml")
    which = cluster.add_subparsers(dest="cluster_kind", required=True, metavar="KIND")
    c_philly = which.add_parser("philly", help="project tiers, mostly 8-GPU nodes (1,024 GPUs)")
    c_philly.add_argument("--out", required=True)
    c_philly.add_argument("--scale", type=float, default=1.0, help="multiply node counts")
    c_philly.set_defaults(func=run_cluster_philly)
    c_alibaba = which.add_parser("alibaba", help="every N-th node of Alibaba's node list")
    c_alibaba.add_argument("--nodes", default=DEFAULT_ALIBABA_NODES)
    c_alibaba.add_argument("--out", required=True)
    c_alibaba.add_argument("--every", type=_positive_int, default=64)
    c_alibaba.set_defaults(func=run_cluster_alibaba)


def _finish(rows: list[TraceRow], report: LoadReport, args: argparse.Namespace) -> int:
    count = write_trace(rows, args.out)
    for line in report.lines():
        print(line, file=sys.stderr)
    if rows:
        span = max(r.submit_time for r in rows)
        print(
            f"wrote {count} jobs to {args.out}; submissions span {span / 86400:.2f} days",
            file=sys.stderr,
        )
    if args.cluster:
        gpus = cluster_gpus(Path(args.cluster).read_text(encoding="utf-8"))
        full = offered_load(rows, gpus)
        clipped = offered_load(rows, gpus, clip=True)
        print(
            f"offered load on {gpus} GPUs: {full:.2f} (durations in full), "
            f"{clipped:.2f} (clipped to the submission window)",
            file=sys.stderr,
        )
    return 0


def run_philly(args: argparse.Namespace) -> int:
    options = PhillyOptions(
        top_users=args.top_users,
        other_labs=args.other_labs,
        over8=args.over_8,
        multi_node=args.multi_node,
        killed=args.killed,
        time_limit=args.time_limit,
        window_s=args.window,
        carry_over=args.carry_over,
    )
    rows, report = load_philly(args.input, options)
    return _finish(rows, report, args)


def run_alibaba(args: argparse.Namespace) -> int:
    options = AlibabaOptions(
        labs=args.labs,
        lab_by=args.lab_by,
        fractional=args.fractional,
        time_limit=args.time_limit,
        window_s=args.window,
        carry_over=args.carry_over,
    )
    rows, report = load_alibaba(args.input, options)
    return _finish(rows, report, args)


def _write_cluster(text: str, out: str, gpus: int, nodes: int) -> int:
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    print(f"wrote {out}: {nodes} nodes, {gpus} GPUs", file=sys.stderr)
    return 0


def run_cluster_philly(args: argparse.Namespace) -> int:
    spec = philly_cluster(scale=args.scale)
    tiers = ", ".join(f"{t} {n}" for t, n in spec.gpus_by_tier().items())
    header = [
        "Example cluster for replaying the Philly trace's last 10 days (see data/traces/README.md",
        "and docs/policy-comparison.md). Project tiers (SPEC §1 FP32 TFLOPS), mostly 8-GPU nodes.",
        f"Generated by: jpushare trace cluster philly --scale {args.scale:g} --out {args.out}",
        f"{len(spec.nodes)} nodes, {spec.gpus} GPUs: {tiers}.",
    ]
    return _write_cluster(cluster_yaml(spec, header), args.out, spec.gpus, len(spec.nodes))


def run_cluster_alibaba(args: argparse.Namespace) -> int:
    nodes = read_alibaba_nodes(args.nodes)
    spec = alibaba_cluster(nodes, every=args.every)
    total = sum(n.gpus for n in nodes)
    tiers = ", ".join(f"{t} {n}" for t, n in spec.gpus_by_tier().items())
    header = [
        f"Example cluster for replaying the Alibaba openb trace: every {args.every}-th node of",
        f"openb_node_list_gpu_node.csv ({len(nodes)} nodes, {total} GPUs) in serial-number order.",
        "GPU models -> tiers with approximate FP32 TFLOPS (jpushare.traces.alibaba.ALIBABA_TIERS;",
        "G1/G2/G3 are undisclosed models with placeholder figures).",
        f"Generated by: jpushare trace cluster alibaba --every {args.every} --out {args.out}",
        f"{len(spec.nodes)} nodes, {spec.gpus} GPUs: {tiers}.",
    ]
    return _write_cluster(cluster_yaml(spec, header), args.out, spec.gpus, len(spec.nodes))
