"""`jpushare simulate`: replay a trace on a cluster under one or more policies (formats.md).

    jpushare simulate --cluster CLUSTER.yaml --trace TRACE.csv
                      [--policy reservation|hol-skip|fifo|backfill|all]...
                      [--placement pack|spread]... [--top-job first-waiting|first-queued]
                      [--reserved-gpus llm-only|lend-by-limit]
                      [--limits exact|trace|user:SEED|none]
                      [--cycle 5] [--out DIR]

Every policy runs under every placement order given (SPEC §1: `pack`, best fit, the
default; `spread`, most idle first); each run is labelled "<policy>/<placement>". One run
writes jobs.csv, summary.json and PNG plots into DIR; several write DIR/<policy>/<placement>/
each, plus comparison.md, comparison.csv and wait_by_gpus.png in DIR. A summary table goes
to stdout, a progress bar to stderr.
Exit codes: 0 done, 1 the outputs could not be written, 2 bad arguments or input files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from jpushare.formats.arguments import add_trace_arguments, positive_seconds
from jpushare.formats.cluster_file import load_cluster
from jpushare.formats.errors import FormatError
from jpushare.formats.trace_file import check_tiers, load_trace
from jpushare.policy.options import RESERVED_GPUS, TOP_JOBS, ReservedGpus, TopJob
from jpushare.policy.order import PLACEMENT_ORDERS, PlacementOrder
from jpushare.policy.peers import POLICIES
from jpushare.sim.engine import SimResult, simulate
from jpushare.sim.limits import parse_limits, with_limits
from jpushare.sim.report import comparison_text, summary, write_comparison, write_outputs

EXIT_OK = 0
EXIT_WRITE_FAILED = 1
EXIT_BAD_INPUT = 2


def register(subparsers: Any) -> None:
    """Add the `simulate` sub-command."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "simulate",
        help="replay a job trace on a cluster under a scheduling policy",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    add_trace_arguments(p)
    p.add_argument(
        "--policy",
        action="append",
        choices=[*POLICIES, "all"],
        help="policy to replay (default reservation); repeat it, or give 'all', to compare",
    )
    p.add_argument(
        "--placement",
        action="append",
        choices=PLACEMENT_ORDERS,
        help="dispatch order inside a tier: pack (best fit, default) or spread (most idle "
        "first); repeat it to compare",
    )
    p.add_argument(
        "--top-job",
        choices=TOP_JOBS,
        default=TopJob.FIRST_WAITING.value,
        help="which job R2/R3 refer to (SPEC decision 7): first-waiting (the first job that "
        "cannot start, default) or first-queued (queue[0], the note's literal reading)",
    )
    p.add_argument(
        "--reserved-gpus",
        choices=RESERVED_GPUS,
        default=ReservedGpus.LLM_ONLY.value,
        help="what may run on reserved GPUs: llm-only (R4, default) or lend-by-limit (a job "
        "whose time limit ends by the reservation's projected fill may borrow them)",
    )
    p.add_argument(
        "--limits",
        type=_limits,
        default="trace",
        metavar="exact|trace|user:SEED|none",
        help="the jobs' time limits: the run (exact), the trace's time_limit or the run "
        "(trace, default), a user's estimate drawn 2-10x the run and rounded (user:SEED), "
        "or none (formats.md §3.1)",
    )
    p.add_argument(
        "--cycle",
        type=positive_seconds,
        default=5.0,
        metavar="SECONDS",
        help="dispatch cycle length (default 5)",
    )
    p.add_argument("--out", type=Path, metavar="DIR", help="write jobs.csv, summary.json, plots")
    p.add_argument(
        "--every-cycle",
        action="store_true",
        help="run the policy at every cycle instead of skipping cycles where nothing can "
        "change (slow; the result is the same)",
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.set_defaults(func=run)


def _limits(text: str) -> str:
    try:
        parse_limits(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _policies(chosen: list[str] | None) -> list[str]:
    if not chosen:
        return ["reservation"]
    out: list[str] = []
    for name in chosen:
        for n in POLICIES if name == "all" else [name]:
            if n not in out:
                out.append(n)
    return out


def _placements(chosen: list[str] | None) -> list[PlacementOrder]:
    if not chosen:
        return [PlacementOrder.PACK]
    return [PlacementOrder(name) for name in dict.fromkeys(chosen)]


def _replay(
    args: argparse.Namespace, policy: str, placement: PlacementOrder, cluster: Any, jobs: Any
) -> SimResult:
    from tqdm import tqdm

    with tqdm(
        total=len(jobs),
        desc=f"{policy}/{placement}",
        unit="job",
        file=sys.stderr,
        disable=None,
        leave=False,
    ) as bar:

        def progress(done: int, total: int) -> None:
            bar.update(done - bar.n)

        return simulate(
            cluster,
            jobs,
            policy,
            args.cycle,
            placement=placement,
            every_cycle=args.every_cycle,
            progress=progress,
            top_job=args.top_job,
            reserved_gpus=args.reserved_gpus,
        )


def run(args: argparse.Namespace) -> int:
    try:
        cluster = load_cluster(args.cluster)
        jobs = with_limits(load_trace(args.trace), args.limits)
        check_tiers(jobs, cluster.tiers, str(args.trace))
    except FormatError as e:
        print(f"jpushare simulate: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT

    policies = _policies(args.policy)
    placements = _placements(args.placement)
    results = [
        _replay(args, policy, placement, cluster, jobs)
        for policy in policies
        for placement in placements
    ]
    summaries = [summary(r) for r in results]

    if args.out is not None:
        try:
            _write(args, results)
        except OSError as e:
            print(f"jpushare simulate: cannot write to {args.out}: {e}", file=sys.stderr)
            return EXIT_WRITE_FAILED

    sys.stdout.write(
        f"{len(jobs)} jobs on {cluster.capacity_gpus} GPUs "
        f"({len(cluster.placements)} placements), cycle {args.cycle:g}s"
        + ("" if args.limits == "trace" else f", limits {args.limits}")
        + ("" if args.reserved_gpus == "llm-only" else f", reserved GPUs {args.reserved_gpus}")
        + "\n"
    )
    sys.stdout.write(comparison_text(summaries))
    if args.out is not None:
        sys.stdout.write(f"outputs in {args.out}\n")
    return EXIT_OK


def _write(args: argparse.Namespace, results: list[SimResult]) -> None:
    out: Path = args.out
    several = len(results) > 1
    summaries = []
    for r in results:
        d = out / r.policy / r.placement if several else out
        summaries.append(write_outputs(r, d))
        if not args.no_plots:
            from jpushare.sim.plots import write_plots

            write_plots(r, d)
    if several:
        write_comparison(summaries, out)
        if not args.no_plots:
            from jpushare.sim.plots import plot_wait_by_gpus

            plot_wait_by_gpus(results, out / "wait_by_gpus.png")
