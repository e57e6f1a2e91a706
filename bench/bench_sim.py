"""Benchmark of the trace simulator: the shipped real traces under every policy and placement.

The traces and clusters are those of `scripts/compare_policies.py` (docs/policy-comparison.md):
Philly's last 10 days (14,001 jobs) on examples/philly-cluster.yaml and Alibaba openb's
last 35 days with carry-over (6,203 pods) on examples/alibaba-cluster.yaml, converted with
the project's loaders exactly as `jpushare trace` does and read back from CSV as
`jpushare simulate` reads them. Only `simulate()` is timed (no reports, no plots).

Prints one row per (trace, policy, placement): trace jobs per second of wall time and of
CPU time (the CPU figure is the one to compare on a shared machine: it leaves out the time
other processes took), cycles run, and the mean queue length the policy saw per cycle (the
policies' cost per cycle grows with it). Asserts nothing.

Run: `.venv/bin/python bench/bench_sim.py` (`--trace philly|alibaba`, `--policy NAME`,
`--placement pack|spread`, each repeatable; `--repeat N` keeps the fastest of N runs;
`--top-job first-queued` reads SPEC decision 7 the old way, to compare like with like).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from jpushare.formats.cluster_file import ClusterSpec, load_cluster
from jpushare.formats.trace_file import TraceJob, load_trace
from jpushare.policy.model import Decisions, Snapshot
from jpushare.policy.options import TopJob
from jpushare.policy.order import PLACEMENT_ORDERS
from jpushare.policy.peers import POLICIES
from jpushare.sim.engine import simulate
from jpushare.traces import TraceRow, write_trace
from jpushare.traces.shipped import shipped_trace

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "traces"
TARGET_JOBS_PER_S = 10_000


@dataclass(frozen=True)
class Case:
    name: str
    cluster: Path

    def rows(self) -> list[TraceRow]:
        """The converted trace, as compare_policies.py builds it."""
        return shipped_trace("philly-10d" if self.name == "philly" else "alibaba-35d", DATA)


CASES = {
    "philly": Case("philly", ROOT / "examples" / "philly-cluster.yaml"),
    "alibaba": Case("alibaba", ROOT / "examples" / "alibaba-cluster.yaml"),
}


def load_case(case: Case, tmp: Path) -> tuple[ClusterSpec, list[TraceJob]]:
    path = tmp / f"{case.name}.csv"
    write_trace(case.rows(), path)
    return load_cluster(case.cluster), load_trace(path)


def run(
    cluster: ClusterSpec,
    jobs: list[TraceJob],
    policy: str,
    placement: str,
    repeat: int,
    top_job: TopJob = TopJob.FIRST_WAITING,
) -> tuple[float, float, int]:
    """(wall s, CPU s, cycles run): the fastest of `repeat` replays."""
    best: tuple[float, float, int] | None = None
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        result = simulate(cluster, jobs, policy, 5.0, placement=placement, top_job=top_job)
        got = (time.perf_counter() - w0, time.process_time() - c0, result.cycles_run)
        if best is None or got[1] < best[1]:
            best = got
    assert best is not None
    return best


def mean_queue(
    cluster: ClusterSpec,
    jobs: list[TraceJob],
    policy: str,
    placement: str,
    top_job: TopJob = TopJob.FIRST_WAITING,
) -> float:
    lengths: list[int] = []

    def observe(snapshot: Snapshot, decisions: Decisions) -> None:
        lengths.append(len(snapshot.queue))

    simulate(cluster, jobs, policy, 5.0, placement=placement, observer=observe, top_job=top_job)
    return sum(lengths) / max(1, len(lengths))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--trace", action="append", choices=list(CASES))
    ap.add_argument("--policy", action="append", choices=list(POLICIES))
    ap.add_argument("--placement", action="append", choices=PLACEMENT_ORDERS)
    ap.add_argument("--repeat", type=int, default=1, help="keep the fastest of N replays")
    ap.add_argument("--top-job", choices=[t.value for t in TopJob], default=TopJob.FIRST_WAITING)
    args = ap.parse_args()
    header = (
        f"| {'trace':<7} | {'policy':<11} | {'placement':<9} | {'jobs':>6} | {'cycles':>6} "
        f"| {'mean queue':>10} | {'wall s':>6} | {'CPU s':>6} | {'jobs/s (wall)':>13} "
        f"| {'jobs/s (CPU)':>12} |"
    )
    print(header)
    print("|" + "|".join("-" * len(c) for c in header.split("|")[1:-1]) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.trace or list(CASES):
            cluster, jobs = load_case(CASES[name], Path(tmp))
            for policy in args.policy or list(POLICIES):
                for placement in args.placement or list(PLACEMENT_ORDERS):
                    top_job = TopJob(args.top_job)
                    wall, cpu, cycles = run(cluster, jobs, policy, placement, args.repeat, top_job)
                    queue = mean_queue(cluster, jobs, policy, placement, top_job)
                    mark = "" if len(jobs) / cpu >= TARGET_JOBS_PER_S else " *"
                    print(
                        f"| {name:<7} | {policy:<11} | {placement:<9} | {len(jobs):>6} "
                        f"| {cycles:>6} | {queue:>10.0f} | {wall:>6.2f} | {cpu:>6.2f} "
                        f"| {len(jobs) / wall:>13,.0f} | {len(jobs) / cpu:>10,.0f}{mark:2} |",
                        flush=True,
                    )
    print(f"\n* below the target of {TARGET_JOBS_PER_S:,} trace jobs per second of CPU time")


if __name__ == "__main__":
    main()
