#!/usr/bin/env python3
"""How good are start estimates? Estimate at submission vs actual start, in a replay.

    .venv/bin/python bench/estimate_accuracy.py [--samples 100] [--case example philly alibaba]

For each case (examples/trace.csv on examples/cluster.yaml; Philly's last 10 days and
Alibaba's last 35 days, converted as scripts/compare_policies.py does):

1. replay the trace under `reservation`/`pack` (5 s cycles): every job's actual start;
2. replay it again with an observer; at the cycle that admits a sampled job, call
   `sim.estimate.estimate_starts` on exactly the snapshot that cycle's policy saw (the
   live state the service would load: placements, queue with reservations, running jobs
   with their starts, lab usage), with the API's budget (`api.estimates`), as the service
   would answer `jpushare queue --start` at that instant. The estimator knows what the
   service knows: the traces' `time_limit` (Philly and Alibaba: the duration rounded up to
   whole hours; examples/trace.csv: the given limits) and nothing about later arrivals;
3. print, per GPU count, the median and p90 of |estimate - actual start|, over all sampled
   jobs and over those that waited at least one cycle, and how many got no estimate.

`--basis history` drops every time limit, so the estimates come from the lab's completed
runs of that GPU count so far (the traces have no users): a queued job's median run, a
running job's median remaining run among those that lasted longer than it has run so far
(`RunHistory.remaining`), else the default hour (queued) or "unknown" (running).

Sampling: up to `--samples` jobs per GPU count, evenly spaced in submission order.
Deterministic; asserts nothing.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from jpushare.api.estimates import MAX_FORECAST_CYCLES, MAX_FORECAST_JOBS
from jpushare.formats.cluster_file import load_cluster
from jpushare.formats.trace_file import TraceJob, load_trace, parse_trace
from jpushare.policy.model import Decisions, Snapshot
from jpushare.sim.engine import SimResult, simulate
from jpushare.sim.estimate import JobOwner, PastRun, RunHistory, estimate_starts
from jpushare.traces import DAY_S, write_rows
from jpushare.traces.alibaba import AlibabaOptions, load_alibaba
from jpushare.traces.philly import PhillyOptions, load_philly

ROOT = Path(__file__).resolve().parents[1]
CYCLE_S = 5.0
CASES = {
    "example": ("examples/trace.csv", "examples/cluster.yaml"),
    "philly": ("Philly, last 10 days", "examples/philly-cluster.yaml"),
    "alibaba": ("Alibaba openb, last 35 days with carry-over", "examples/alibaba-cluster.yaml"),
}


def load_case(name: str) -> list[TraceJob]:
    if name == "example":
        return load_trace(ROOT / "examples" / "trace.csv")
    data = ROOT / "data" / "traces"
    if name == "philly":
        rows, _ = load_philly(
            data / "philly_dirlab_15k" / "philly_data_training.csv",
            PhillyOptions(window_s=10 * DAY_S),
        )
    else:
        rows, _ = load_alibaba(
            data / "alibaba_openb_2023" / "openb_pod_list_default.csv",
            AlibabaOptions(window_s=35 * DAY_S, carry_over=True),
        )
    text = io.StringIO()
    write_rows(rows, text)
    return parse_trace(text.getvalue(), name)


def sample(jobs: Sequence[TraceJob], per_size: int) -> set[str]:
    by_size: dict[int, list[TraceJob]] = defaultdict(list)
    for j in sorted(jobs, key=lambda j: (j.submit_time, j.job_id)):
        by_size[j.num_gpus].append(j)
    chosen: set[str] = set()
    for group in by_size.values():
        step = max(1, len(group) // per_size)
        chosen.update(j.job_id for j in group[::step][:per_size])
    return chosen


class Sampler:
    """The observer of the second replay: forecasts each sampled job at its admission."""

    def __init__(
        self, jobs: Sequence[TraceJob], chosen: set[str], first: SimResult, history: bool
    ) -> None:
        self.pending = sorted(
            (j for j in jobs if j.job_id in chosen), key=lambda j: (j.submit_time, j.job_id)
        )
        self.next = 0
        self.owners = {j.job_id: JobOwner(j.lab, j.lab) for j in jobs}
        self.history = history
        # Completed runs in end order, for the history basis: (end, PastRun).
        ends = [
            (r.last.end, PastRun(r.lab, r.lab, r.num_gpus, r.last.end - r.last.start))
            for r in first.jobs
            if r.last is not None and r.state.value == "COMPLETED"
        ]
        self.ends = sorted(ends, key=lambda e: e[0])
        self.estimates: dict[str, float | None] = {}
        self.forecast_s = 0.0

    def __call__(self, snapshot: Snapshot, _decisions: Decisions) -> None:
        now = snapshot.now
        due: list[str] = []
        while self.next < len(self.pending) and self.pending[self.next].submit_time <= now:
            due.append(self.pending[self.next].job_id)
            self.next += 1
        queued = {q.job_id for q in snapshot.queue}
        due = [j for j in due if j in queued]
        if not due:
            return
        snap = Snapshot(
            snapshot.tiers,
            tuple(snapshot.placements),
            tuple(snapshot.queue),
            dict(snapshot.lab_usage),
            now,
            tuple(snapshot.running),
        )
        runs = [run for end, run in self.ends if end <= now]  # what the service reads
        if self.history:
            snap = replace(
                snap,
                queue=tuple(replace(q, time_limit_s=None) for q in snap.queue),
                running=tuple(replace(r, time_limit_s=None) for r in snap.running),
            )
        started = time.perf_counter()
        est = estimate_starts(
            snap,
            self.owners,
            RunHistory(runs),
            cycle_s=CYCLE_S,
            max_cycles=MAX_FORECAST_CYCLES,
            max_jobs=MAX_FORECAST_JOBS,
            follow=due,
        )
        self.forecast_s += time.perf_counter() - started
        for j in due:
            self.estimates[j] = est.starts.get(j)


def pct(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def fmt(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def run_case(name: str, per_size: int, history: bool) -> list[str]:
    jobs = load_case(name)
    cluster = load_cluster(ROOT / CASES[name][1])
    first = simulate(cluster, jobs, "reservation", CYCLE_S)
    actual = {r.job_id: r.first_start for r in first.jobs}
    chosen = sample(jobs, per_size)
    sampler = Sampler(jobs, chosen, first, history)
    simulate(cluster, jobs, "reservation", CYCLE_S, observer=sampler)
    size_of = {j.job_id: j.num_gpus for j in jobs}
    submit = {j.job_id: j.submit_time for j in jobs}
    errors: dict[int, list[float]] = defaultdict(list)
    waited: dict[int, list[float]] = defaultdict(list)
    missing: dict[int, int] = defaultdict(int)
    for job_id, est in sampler.estimates.items():
        start = actual[job_id]
        n = size_of[job_id]
        if start is None:
            continue  # never started in the replay (e.g. its node stayed down)
        if est is None:
            missing[n] += 1
            continue
        errors[n].append(abs(est - start))
        if start - submit[job_id] >= CYCLE_S:
            waited[n].append(abs(est - start))
    lines = [
        f"**{CASES[name][0]}** ({len(jobs):,} jobs; {len(sampler.estimates):,} sampled, "
        f"forecasts {sampler.forecast_s:.1f} s in all)",
        "",
        "| GPUs | sampled | median abs error | p90 abs error | waited ≥ 1 cycle | median / p90 "
        "among those | no estimate |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in sorted(set(errors) | set(missing)):
        e, w = errors[n], waited[n]
        all_cols = f"{fmt(statistics.median(e))} | {fmt(pct(e, 90))}" if e else "- | -"
        w_cols = f"{fmt(statistics.median(w))} / {fmt(pct(w, 90))}" if w else "-"
        lines.append(
            f"| {n} | {len(e) + missing[n]} | {all_cols} | {len(w)} | {w_cols} | {missing[n]} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=100, help="jobs per GPU count (default 100)")
    ap.add_argument("--case", nargs="+", choices=list(CASES), default=list(CASES))
    ap.add_argument("--basis", choices=("time_limit", "history"), default="time_limit")
    args = ap.parse_args(argv)
    for name in args.case:
        print("\n".join(run_case(name, args.samples, args.basis == "history")), end="\n\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
