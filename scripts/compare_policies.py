#!/usr/bin/env python3
"""Regenerate docs/policy-comparison.md: four policies × two placements on two real traces.

    .venv/bin/python scripts/compare_policies.py [--out DIR] [--doc FILE] [--reuse]

Steps, all from the repository root:
1. convert the shipped raw traces with the project's loaders (`jpushare.traces`), exactly
   as `jpushare trace philly --window last10d` and
   `jpushare trace alibaba --window last35d --carry-over` do;
2. replay each on its example cluster (`examples/philly-cluster.yaml`,
   `examples/alibaba-cluster.yaml`) with `jpushare simulate --policy all --placement pack
   --placement spread --no-plots` (one process per trace, run as `python -m jpushare.cli`);
3. read every `<out>/<trace>/<policy>/<placement>/summary.json` (the simulator's public
   output) and write the markdown tables, with the commands that reproduce them.

`--reuse` skips steps 1–2 and only re-renders from existing summaries.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jpushare.sim.report import lab_failure_rows, watch_rows
from jpushare.traces import DAY_S, TraceRow, offered_load, write_trace
from jpushare.traces.clusters import cluster_gpus
from jpushare.traces.shipped import shipped_trace

ROOT = Path(__file__).resolve().parents[1]
PEER_BEGIN = "<!-- BEGIN slurm-peer"  # scripts/peer_compare.py's section starts here
DATA = ROOT / "data" / "traces"
POLICIES = ("reservation", "hol-skip", "fifo", "backfill")
PLACEMENTS = ("pack", "spread")
GPU_COUNTS = ("1", "2", "4", "8")


@dataclass(frozen=True)
class Case:
    """One trace replayed on one cluster."""

    name: str
    title: str
    cluster: str  # relative to the repository root
    trace_command: str  # the equivalent `jpushare trace` command line


CASES = (
    Case(
        "philly-10d",
        "Philly, last 10 days (14,001 jobs) on examples/philly-cluster.yaml (1,024 GPUs)",
        "examples/philly-cluster.yaml",
        "jpushare trace philly --window last10d --out out/compare/philly-10d.csv",
    ),
    Case(
        "alibaba-35d",
        "Alibaba openb, last 35 days with carry-over (6,203 pods) on "
        "examples/alibaba-cluster.yaml (53 GPUs)",
        "examples/alibaba-cluster.yaml",
        "jpushare trace alibaba --window last35d --carry-over --out out/compare/alibaba-35d.csv",
    ),
)


def build_trace(case: Case) -> list[TraceRow]:
    """The converted trace of a case (same rules as its `trace_command`)."""
    return shipped_trace("philly-10d" if case.name == "philly-10d" else "alibaba-35d", DATA)


def simulate_command(case: Case, trace: Path, out: Path) -> list[str]:
    return [
        "jpushare",
        "simulate",
        "--cluster",
        case.cluster,
        "--trace",
        str(trace),
        "--policy",
        "all",
        *(arg for placement in PLACEMENTS for arg in ("--placement", placement)),
        "--no-plots",
        "--out",
        str(out),
    ]


def run_case(case: Case, out_root: Path) -> float:
    """Convert, then replay under every policy; returns the offered load (clipped)."""
    trace = out_root / f"{case.name}.csv"
    rows = build_trace(case)
    write_trace(rows, trace)
    argv = simulate_command(case, trace, out_root / case.name)
    print("$", " ".join(argv), file=sys.stderr, flush=True)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jpushare.cli", *argv[1:]], cwd=ROOT, check=True)
    print(f"  done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    gpus = cluster_gpus((ROOT / case.cluster).read_text(encoding="utf-8"))
    return offered_load(rows, gpus, clip=True)


def load_summaries(out_root: Path, case: Case) -> dict[str, dict[str, Any]]:
    """Every run's summary by its label `policy/placement`, pack before spread."""
    found: dict[str, dict[str, Any]] = {}
    for placement in PLACEMENTS:
        for policy in POLICIES:
            path = out_root / case.name / policy / placement / "summary.json"
            if path.exists():
                found[f"{policy}/{placement}"] = json.loads(path.read_text(encoding="utf-8"))
    return found


def hours(seconds: Any) -> str:
    if seconds is None:
        return "–"
    value = float(seconds) / 3600
    return f"{value:.2f} h" if value < 10 else f"{value:.0f} h"


def pct(value: Any) -> str:
    return "–" if value is None else f"{100 * float(value):.1f} %"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out.extend("| " + " | ".join(r) + " |" for r in rows)
    return out


def render_case(case: Case, summaries: dict[str, dict[str, Any]], load: float | None) -> list[str]:
    lines = [f"## {case.title}", ""]
    if load is not None:
        lines += [
            f"Offered load (GPU-seconds inside the submission window / capacity): {load:.2f}.",
            "",
        ]
    if not summaries:
        return [*lines, "_No summaries found: run the script without `--reuse`._", ""]
    main = []
    for policy, s in summaries.items():
        w = s.get("wait_s", {})
        main.append(
            [
                f"`{policy}`",
                pct(s.get("gpu_utilization")),
                pct(s.get("reserved_fraction")),
                hours(w.get("mean")),
                hours(w.get("p95")),
                hours(w.get("max")),
                "–" if s.get("jain_fairness") is None else f"{float(s['jain_fairness']):.3f}",
                f"{float(s.get('makespan_s', 0)) / DAY_S:.1f} d",
                f"{float(s.get('wall_s', 0)):.1f} s",
            ]
        )
    lines += table(
        [
            "policy",
            "GPU utilization",
            "reserved",
            "wait mean",
            "wait p95",
            "wait max",
            "Jain fairness",
            "makespan",
            "simulator wall time",
        ],
        main,
    )
    lines += ["", "Wait by GPU count (mean / p95 / max):", ""]
    by_gpus = []
    for policy, s in summaries.items():
        row = [f"`{policy}`"]
        for g in GPU_COUNTS:
            w = s.get("wait_s_by_gpus", {}).get(g)
            row.append(
                "–" if not w else f"{hours(w['mean'])} / {hours(w['p95'])} / {hours(w['max'])}"
            )
        by_gpus.append(row)
    lines += table(["policy", *(f"{g} GPU" for g in GPU_COUNTS)], by_gpus)
    lines += ["", "Reservations:", ""]
    resv = []
    for policy, s in summaries.items():
        r = s.get("reservations", {})
        ended = r.get("ended", {})
        resv.append(
            [
                f"`{policy}`",
                str(r.get("started", 0)),
                *(str(ended.get(k, 0)) for k in ("filled", "swap", "r3", "r5", "cancel")),
                hours(r.get("mean_hold_s")),
            ]
        )
    lines += table(["policy", "started", "filled", "swap", "R3", "R5", "cancel", "mean hold"], resv)
    states = []
    for policy, s in summaries.items():
        st = s.get("states", {})
        states.append(
            [f"`{policy}`", str(s.get("jobs", 0))]
            + [str(st.get(k, 0)) for k in ("COMPLETED", "FAILED", "CANCELLED", "REJECTED")]
        )
    lines += ["", "Job outcomes:", ""]
    lines += table(["policy", "jobs", "completed", "failed", "cancelled", "rejected"], states)
    runs = list(summaries.values())
    lines += ["", "Watch-list ([docs/policy.md §10](policy.md)):", ""]
    lines += table(*watch_rows(runs))
    failures = lab_failure_rows(runs)
    if failures[1]:
        lines += ["", "Failed reservations per lab (failed / started):", ""]
        lines += table(*failures)
    return [*lines, ""]


def render(out_root: Path, loads: dict[str, float]) -> str:
    lines = [
        "# Policy comparison on the real traces",
        "",
        "Generated by `scripts/compare_policies.py`; do not edit by hand. Traces and clusters:",
        "`data/traces/README.md` (conversion rules, counts, cluster sizing). Policies",
        "([policy.md §11](policy.md)): `reservation` = the spec's cycle (policy.md §3);",
        "`hol-skip` = start whatever fits, skipping; `fifo` = stop at the first job that cannot",
        "start; `backfill` = fair-share + EASY backfill on `time_limit` = duration rounded up to",
        "whole hours. Placements (policy.md §1): `pack` = best fit inside a tier (the spec's",
        "rule), `spread` = most idle GPUs first (the old rule). Utilization and reserved",
        "fraction are over capacity × (last end − first submission); waits are first start −",
        "submission. The watch-list's failed reservations are those released by R3, R5 or a",
        "cancel; burden = TFLOP-s charged ÷ TFLOP-s run per job size (1.00 = no burden).",
        "",
        "Reproduce (from the repository root, after `make setup`):",
        "",
        "```",
        ".venv/bin/python scripts/compare_policies.py",
        "```",
        "",
        "which is the same as:",
        "",
        "```",
    ]
    for case in CASES:
        trace = out_root.relative_to(ROOT) if out_root.is_relative_to(ROOT) else out_root
        lines.append(case.trace_command)
        lines.append(
            " ".join(simulate_command(case, trace / f"{case.name}.csv", trace / case.name))
        )
    lines += ["```", ""]
    for case in CASES:
        lines += render_case(case, load_summaries(out_root, case), loads.get(case.name))
    lines += NOTES
    lines += [
        f"_Run at commit {source_state()}; {platform.machine()}, Python "
        f"{platform.python_version()}._",
        "",
    ]
    return "\n".join(lines)


NOTES = [
    "## Reading the numbers",
    "",
    "- **Pack (best fit) is the better dispatch order on both traces**, for every policy but",
    "  `fifo`'s order-bound waits. `reservation`: mean wait 2.71 → 2.46 h on Philly (−9 %)",
    "  and 3.49 → 1.02 h on Alibaba (−71 %); 8-GPU mean wait 26 → 22 h (−14 %) and 464 →",
    "  136 h (−71 %). Packing keeps whole nodes whole, which only multi-GPU jobs need.",
    "- **What pack costs**: on Philly the small jobs wait longer under pack (`reservation`:",
    "  1 GPU 0.22 → 0.32 h, 2 GPUs 0.15 → 0.38 h, 4 GPUs 0.23 → 0.61 h), because they now",
    "  queue for the partly used nodes instead of spreading over idle ones. The mean over all",
    "  jobs still falls; a site with mostly 1-GPU users may prefer `spread` (an option).",
    "- **Reservations still fail, mostly by R3.** Philly: 64 % of 2,168 reservations under",
    "  pack end by R3 (one lab, u28, 78 % of its 1,242); 785 end by swap, 3 fill. Alibaba:",
    "  97 % of 502 (labs lab4 and lab5: 99 %), 5 fill. The top job changes whenever a job",
    "  ends and its lab is billed, so the reservation rarely lives long enough to fill: the",
    "  design note's risk (its §6.2) is real at this scale. Hysteresis on R3 or a minimum",
    "  hold are policy changes for the user to decide; nothing here changes R3.",
    "- **Reservation versus the peers**: under pack, 8-GPU waits are about equal for",
    "  `reservation`, `hol-skip` and `backfill` on both traces (Philly 21–23 h, Alibaba",
    "  136 h), so the reservation buys multi-GPU jobs little here, and on Alibaba it makes",
    "  4-GPU pods wait 21 h where `hol-skip` makes them wait 0.9 h and `backfill` 5.6 h.",
    "  The burden column says who pays: Alibaba's 8-GPU pods are charged 1.56× what they",
    "  ran and 4-GPU pods 1.08× (reservation cost); Philly's burden stays ≤ 1.01.",
    "- `fifo` is the head-of-line-blocking worst case, on Alibaba above all: one 8-GPU pod",
    "  at the head stops every 1-GPU pod behind it.",
    "- Utilization is low on Philly because the window is short and the tail is long: the",
    "  last submission is at 9.9 days but a few jobs run ~50 days more, and the capacity",
    "  counted runs to the last end. Compare policies with each other, not with 100 %.",
    "- Simulator wall times were measured on a shared 2-core machine; `bench/bench_sim.py`",
    "  measures speed properly (README, Benchmarks).",
    "",
]


def source_state() -> str:
    """`<short commit>` plus `(uncommitted changes in src/)` when src/ is dirty."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head} (with uncommitted changes in src/)" if dirty else head


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "compare")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "policy-comparison.md")
    parser.add_argument("--reuse", action="store_true", help="only re-render existing summaries")
    args = parser.parse_args(argv)
    out_root: Path = args.out.resolve()
    out_root.mkdir(parents=True, exist_ok=True)
    loads: dict[str, float] = {}
    for case in CASES:
        if args.reuse:
            rows = build_trace(case)
            gpus = cluster_gpus((ROOT / case.cluster).read_text(encoding="utf-8"))
            loads[case.name] = offered_load(rows, gpus, clip=True)
        else:
            loads[case.name] = run_case(case, out_root)
    args.doc.parent.mkdir(parents=True, exist_ok=True)
    text = render(out_root, loads)
    # The section of scripts/peer_compare.py (live Slurm runs) is kept as it is.
    old = args.doc.read_text(encoding="utf-8") if args.doc.exists() else ""
    if PEER_BEGIN in old:
        text = text.rstrip("\n") + "\n\n" + PEER_BEGIN + old.split(PEER_BEGIN, 1)[1]
    args.doc.write_text(text, encoding="utf-8")
    print(f"wrote {args.doc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
