"""`jpushare slurm-peer`: a trace through Slurm's own scheduler, and job-by-job agreement.

    jpushare slurm-peer run --cluster CLUSTER.yaml --trace TRACE.csv --speed 60 --out DIR
    jpushare slurm-peer agree REFERENCE/jobs.csv OTHER/jobs.csv... [--tolerance 60]

`run` needs a Slurm cluster with accounting (SLURM_CONF; the peer of
`FAKE_SLURM_PEER=1 scripts/slurm/start-fake-cluster.sh`) and root's right to add accounts:
it writes DIR/jobs.csv, DIR/summary.json (the simulator's formats, trace seconds) and
DIR/peer.json (the run's scale, sbatch lateness, mixed GPU types, Slurm job ids).
Exit codes: 0 done, 1 the cluster refused or failed, 2 bad arguments or input files,
130 interrupted (what it submitted is cancelled).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from jpushare.formats.arguments import add_trace_arguments, positive

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def register(subparsers: Any) -> None:
    """Add `slurm-peer run` and `slurm-peer agree`."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "slurm-peer",
        help="replay a trace through Slurm's own scheduler; compare runs job by job",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    sub = p.add_subparsers(dest="peer_command", required=True, metavar="ACTION")
    r = sub.add_parser("run", help="submit a TRACE.csv straight to Slurm and read sacct")
    add_trace_arguments(r, cluster="CLUSTER.yaml (tiers, fit)", speed=True)
    r.add_argument("--out", required=True, type=Path, metavar="DIR")
    r.add_argument("--name-prefix", default="peer-", help="Slurm job names: PREFIX<job_id>")
    r.set_defaults(func=run_cmd)
    a = sub.add_parser("agree", help="first-start agreement of runs with a reference run")
    a.add_argument("reference", type=Path, help="the reference run's jobs.csv")
    a.add_argument("others", type=Path, nargs="+", help="jobs.csv of the runs to compare")
    a.add_argument(
        "--tolerance",
        type=positive,
        default=60.0,
        metavar="SECONDS",
        help="a start within this many trace seconds agrees (default 60)",
    )
    a.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a.set_defaults(func=agree_cmd)


def run_cmd(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from jpushare.formats.cluster_file import load_cluster
    from jpushare.formats.errors import FormatError
    from jpushare.formats.trace_file import check_tiers, load_trace
    from jpushare.sim.report import comparison_text
    from jpushare.slurm_peer.driver import PeerError, run_trace

    try:
        cluster = load_cluster(args.cluster)
        jobs = load_trace(args.trace)
        check_tiers(jobs, cluster.tiers, str(args.trace))
    except FormatError as e:
        print(f"jpushare slurm-peer: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with tqdm(total=len(jobs), desc="submitted", unit="job", file=sys.stderr, disable=None) as bar:

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        def status(left: int) -> None:
            bar.set_postfix_str(f"{left} pending or running")

        try:
            _, doc = run_trace(
                jobs,
                cluster,
                args.speed,
                args.out,
                name_prefix=args.name_prefix,
                progress=progress,
                status=status,
            )
        except PeerError as e:
            print(f"jpushare slurm-peer: {e}", file=sys.stderr)
            return EXIT_FAILED
        except KeyboardInterrupt:
            print("jpushare slurm-peer: interrupted; submitted jobs cancelled", file=sys.stderr)
            return EXIT_INTERRUPTED
    print(comparison_text([doc]))
    return EXIT_OK


def agree_cmd(args: argparse.Namespace) -> int:
    from jpushare.sim.report import text_table
    from jpushare.slurm_peer.agreement import agreement, agreement_rows, read_jobs_csv

    try:
        ref = read_jobs_csv(args.reference)
        results = [(str(o), agreement(ref, read_jobs_csv(o), args.tolerance)) for o in args.others]
    except (OSError, KeyError, ValueError) as e:
        print(f"jpushare slurm-peer agree: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(dict(results), indent=2))
    else:
        print(text_table(*agreement_rows(results)), end="")
    return EXIT_OK
