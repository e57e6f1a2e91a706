#!/usr/bin/env python3
"""Regenerate docs/policy-comparison.md: four policies × two placements on two real traces, and
the reservation policy under both top-job readings × both reserved-GPU modes × four time-limit
models (with EASY backfill under the same limits).

    .venv/bin/python scripts/compare_policies.py [--out DIR] [--doc FILE] [--reuse]

Steps, all from the repository root:
1. convert the shipped raw traces with the project's loaders (`jpushare.traces`), exactly
   as `jpushare trace philly --window last10d` and
   `jpushare trace alibaba --window last35d --carry-over` do;
2. replay each on its example cluster (`examples/philly-cluster.yaml`,
   `examples/alibaba-cluster.yaml`) with `jpushare simulate --policy all --placement pack
   --placement spread --no-plots` (one process per trace, run as `python -m jpushare.cli`);
3. replay each again once per `Variant` (pack only): `reservation` under
   `--top-job first-waiting|first-queued` × `--reserved-gpus llm-only|lend-by-limit` ×
   `--limits exact|trace|user:1|none`, and `backfill` under each `--limits`, into
   `<out>/<trace>/sweep/<variant>/` (`hol-skip` and `fifo` read no limit, so they are not
   swept);
4. read every `summary.json` (the simulator's public output) and write the markdown tables,
   with the commands that reproduce them.

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
TOP_JOBS = ("first-waiting", "first-queued")
RESERVED_GPUS = ("llm-only", "lend-by-limit")
LIMITS = ("exact", "trace", "user:1", "none")


@dataclass(frozen=True)
class Variant:
    """One policy with one top-job reading, reserved-GPU mode and time-limit model."""

    policy: str
    top_job: str
    reserved_gpus: str
    limits: str

    @property
    def folder(self) -> str:
        return "_".join((self.policy, self.top_job, self.reserved_gpus, self.limits)).replace(
            ":", "-"
        )

    def arguments(self) -> list[str]:
        return [
            "--policy",
            self.policy,
            "--top-job",
            self.top_job,
            "--reserved-gpus",
            self.reserved_gpus,
            "--limits",
            self.limits,
        ]


def variants() -> list[Variant]:
    """The sweep: what the top-job reading, lending and the limits change, against EASY
    backfill given the same limits (its top-job reading and lending do not apply)."""
    out = []
    for limits in LIMITS:
        out += [
            Variant("reservation", top, mode, limits) for top in TOP_JOBS for mode in RESERVED_GPUS
        ]
        out.append(Variant("backfill", TOP_JOBS[0], RESERVED_GPUS[0], limits))
    return out


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


def variant_command(case: Case, trace: Path, out: Path, variant: Variant) -> list[str]:
    return [
        "jpushare",
        "simulate",
        "--cluster",
        case.cluster,
        "--trace",
        str(trace),
        *variant.arguments(),
        "--placement",
        "pack",
        "--no-plots",
        "--out",
        str(out / "sweep" / variant.folder),
    ]


def run(argv: list[str]) -> None:
    print("$", " ".join(argv), file=sys.stderr, flush=True)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "jpushare.cli", *argv[1:]],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    print(f"  done in {time.perf_counter() - started:.1f} s", file=sys.stderr)


def run_case(case: Case, out_root: Path) -> float:
    """Convert, then replay under every policy and every variant; returns the offered load
    (clipped)."""
    trace = out_root / f"{case.name}.csv"
    rows = build_trace(case)
    write_trace(rows, trace)
    run(simulate_command(case, trace, out_root / case.name))
    for variant in variants():
        run(variant_command(case, trace, out_root / case.name, variant))
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


def load_sweep(out_root: Path, case: Case) -> list[tuple[Variant, dict[str, Any]]]:
    found = []
    for variant in variants():
        path = out_root / case.name / "sweep" / variant.folder / "summary.json"
        if path.exists():
            found.append((variant, json.loads(path.read_text(encoding="utf-8"))))
    return found


def render_sweep(case: Case, runs: list[tuple[Variant, dict[str, Any]]]) -> list[str]:
    """The sweep's table: waits, failed reservations and lending, one row a variant."""
    lines = [
        f"### {case.name}: top-job reading × reserved GPUs × time limits (pack)",
        "",
    ]
    if not runs:
        return [*lines, "_No sweep found: run the script without `--reuse`._", ""]
    rows = []
    for variant, s in runs:
        w = s.get("wait_s", {})
        by = s.get("wait_s_by_gpus", {})
        r = s["watch"]["reservations"]
        lending = s.get("lending", {})
        reserves = variant.policy == "reservation"
        rows.append(
            [
                f"`{variant.policy}`",
                variant.top_job if reserves else "–",
                variant.reserved_gpus if reserves else "–",
                f"`{variant.limits}`",
                hours(w.get("mean")),
                hours(w.get("p95")),
                " / ".join(hours(by[g]["mean"]) if by.get(g) else "–" for g in GPU_COUNTS),
                "–"
                if not r["started"]
                else f"{r['failed']} / {r['started']} ({pct(r['failed_rate'])})",
                f"{float(lending.get('lent_gpu_hours', 0.0)):.0f}" if reserves else "–",
                (
                    f"{lending.get('top_job_waits', 0)} / {hours(lending.get('wait_mean_s'))}"
                    if lending.get("top_job_waits")
                    else ("0" if reserves else "–")
                ),
            ]
        )
    lines += table(
        [
            "policy",
            "top job",
            "reserved GPUs",
            "limits",
            "wait mean",
            "wait p95",
            "mean wait 1 / 2 / 4 / 8 GPUs",
            "failed reservations",
            "lent GPU-h",
            "top job waited for lent GPUs (n / mean)",
        ],
        rows,
    )
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
    example = variants()[1]
    lines += [
        "```",
        "",
        "and, for the sweep, once per variant (here `reservation`, first-waiting,",
        "lend-by-limit, exact limits; `--limits user:1` draws each user estimate with seed 1):",
        "",
        "```",
        " ".join(
            variant_command(
                CASES[0],
                Path("out/compare") / f"{CASES[0].name}.csv",
                Path("out/compare") / CASES[0].name,
                example,
            )
        ),
        "```",
        "",
        "Defaults of the main tables: top job = the first job that cannot start (SPEC",
        "decision 7), reserved GPUs for the LLM only (R4), time limits from the trace",
        "(`--limits trace`). The sweep crosses the three, on pack only.",
        "",
    ]
    for case in CASES:
        lines += render_case(case, load_summaries(out_root, case), loads.get(case.name))
        lines += render_sweep(case, load_sweep(out_root, case))
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
    'Figures below are from the tables above (pack unless said; "trace limits" = the',
    "default `--limits trace`).",
    "",
    "- **Decision 7 (the top job is the first job that cannot start) cuts failed",
    "  reservations four- to five-fold**: Philly 1,380 of 2,168 (63.7 %) under the literal",
    "  reading (`first-queued`) → 139 of 1,024 (13.6 %); Alibaba 485 of 502 (96.6 %) → 7 of",
    "  24 (29.2 %). A lighter lab's job that starts elsewhere no longer releases the",
    "  reservation. What it costs: held GPUs make small jobs wait longer on Philly (mean",
    "  wait 2.46 → 2.61 h, +6 %; p95 7.65 → 8.95 h; 1-GPU jobs 0.32 → 0.42 h); Alibaba's",
    "  mean is unchanged (1.02 → 1.03 h).",
    "- **Lending reserved GPUs by time limit (`lend-by-limit`) gives most of that back and",
    "  more**, as long as jobs carry limits: Philly mean wait 2.61 → 2.20 h with exact limits",
    "  (−16 %), → 2.38 h with the trace's limits (−9 %), → 2.30 h with users' estimates",
    "  (`user:1`, −12 %); with no limits nothing is lent and nothing changes, as the rule",
    "  says. Against EASY backfill given the same limits: 2.20 vs 2.46 h (exact, −11 %),",
    "  2.30 vs 2.44 h (user, −6 %), 2.38 vs 2.33 h (trace, +2 %). The top job waited for",
    "  lent GPUs after its other GPUs were free 8 times under trace limits (mean 0.06 h), 5",
    "  under user limits, never under exact ones. On Alibaba lending takes 4-GPU pods from",
    "  23 h to 0.24 h of mean wait (backfill: 5.63 h); the 8-GPU pods wait 136 h whatever",
    "  the policy (they wait for carry-over pods that run for weeks).",
    "- **Limits change backfill more than the reservation policy**: backfill on Philly",
    "  is 2.46 h with exact limits, 2.33 h with the trace's, 2.44 h with users' estimates",
    "  and, with none, 2.50 h / p95 6.95 h: exactly `hol-skip`'s, since it cannot rely on",
    "  any end. On Alibaba the trace's limits give the same decisions as exact ones.",
    "- **Pack versus spread under decision 7**: on Philly the means are close (`reservation`",
    "  2.61 h pack, 2.58 h spread) and pack trades small-job waits (1 GPU 0.25 → 0.42 h)",
    "  for 8-GPU ones (25 → 23 h); on Alibaba pack is far better (1.03 vs 3.79 h; 8-GPU",
    "  136 vs 463 h), because it keeps whole nodes whole, which only multi-GPU jobs need.",
    "- **Who pays for reservations** (burden = charged ÷ run): Alibaba's 8-GPU pods 1.63×",
    "  and 4-GPU pods 1.11×; Philly ≤ 1.01. The failed reservations that remain are",
    "  concentrated in one lab on Philly (u28: 111 of its 444).",
    "- **Reservation versus the peers** (pack, trace limits): on Philly `hol-skip` (2.50 h)",
    "  and `backfill` (2.33 h) beat `reservation` (2.61 h), and 8-GPU jobs wait about the",
    "  same under all three (21–23 h): at this load the reservation buys multi-GPU jobs",
    "  little; lending closes most of the gap (2.38 h). Its guarantee (the top job is never",
    "  overtaken) is what the peers do not give.",
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
