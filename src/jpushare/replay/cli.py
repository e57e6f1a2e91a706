"""`jpushare replay`: a trace through a running service; `jpushare replay compare`.

    jpushare replay --trace TRACE.csv --server URL [--admin-token-file PATH] --speed 60
                    --out DIR [--unix-user ACCOUNT] [--workdir DIR] [--allow-existing-jobs]
    jpushare replay compare (--sim DIR | --cluster CLUSTER.yaml --trace TRACE.csv)
                            --live DIR [--tolerance S] [--out DIR]

The admin's token comes from $JPUSHARE_ADMIN_TOKEN (else $JPUSHARE_TOKEN) or from
`--admin-token-file PATH` (`-`: stdin), never from an argument (`--admin-token` is
refused: every user of the host can read a process's arguments).

Exit codes: 0 done, 1 the service failed or could not be reached, 2 bad arguments or
input (or a service that already holds jobs), 130 interrupted (its jobs cancelled).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from jpushare.client.token_args import add_token_options
from jpushare.formats.arguments import add_trace_arguments, not_negative, positive

EXIT_BAD_INPUT = 2


def register(subparsers: Any) -> None:
    """Add the `replay` command and its `compare` action."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "replay",
        help="drive a running service with a job trace; compare it with the simulator",
        description="Submit a TRACE.csv to a running service at a chosen speed, as one user "
        "per lab, and write jobs.csv and summary.json in the simulator's formats from the "
        "service's records (times in trace seconds).",
    )
    add_trace_arguments(p, required=False, cluster=None, speed=True, default_speed=60.0)
    p.add_argument("--server", default=os.environ.get("JPUSHARE_URL"), help="the API's URL")
    add_token_options(
        p,
        option="--admin-token",
        env="JPUSHARE_ADMIN_TOKEN",
        default_help="$JPUSHARE_ADMIN_TOKEN, else $JPUSHARE_TOKEN",
        config_file=False,
    )
    p.add_argument("--out", type=Path, metavar="DIR", help="where jobs.csv, summary.json go")
    p.add_argument(
        "--unix-user",
        metavar="ACCOUNT",
        help="the account every replay user's jobs run as (default: the one running this)",
    )
    p.add_argument(
        "--workdir",
        type=Path,
        metavar="DIR",
        help="the jobs' working directory, shared with the nodes (default: DIR/work)",
    )
    p.add_argument(
        "--allow-existing-jobs",
        action="store_true",
        help="replay into a service that already holds jobs (they change the result)",
    )
    p.add_argument(
        "--placement",
        choices=("pack", "spread"),
        default="pack",
        help="the service's JPUSHARE_PLACEMENT, for summary.json (default pack)",
    )
    p.add_argument(
        "--cycle",
        type=positive,
        metavar="SECONDS",
        help="the service's cycle (default: what its /metrics says)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run, replay_parser=p)

    sub = p.add_subparsers(dest="replay_action", metavar="ACTION")
    c = sub.add_parser(
        "compare",
        help="per job, how closely a simulated run predicts a replayed one",
        description="Compare the jobs.csv of `jpushare simulate --out SIM` with that of "
        "`jpushare replay --out LIVE`: per job, start (within one cycle plus a tolerance), "
        "placement, reservation and state.",
    )
    c.add_argument("--sim", type=Path, metavar="DIR", help="a simulated run's directory")
    add_trace_arguments(
        c,
        required=False,
        cluster="instead of --sim: simulate here on CLUSTER.yaml (with --trace), and the "
        "baseline (the simulator against itself at other cycle phases)",
        trace="the TRACE.csv that was replayed (with --cluster)",
    )
    c.add_argument("--live", type=Path, required=True, metavar="DIR", help="the replayed run")
    c.add_argument(
        "--tolerance",
        type=not_negative,
        metavar="SECONDS",
        help="trace seconds allowed beyond one cycle (default: one more cycle)",
    )
    c.add_argument(
        "--out", type=Path, metavar="DIR", help="write fidelity.csv, .json and .md there"
    )
    c.set_defaults(func=run_compare)


def run(args: argparse.Namespace) -> int:
    from jpushare.client.token_args import TokenFileError, read_token_file
    from jpushare.formats.errors import FormatError
    from jpushare.formats.trace_file import load_trace

    parser: argparse.ArgumentParser = args.replay_parser
    try:
        admin_token = (
            read_token_file(args.admin_token_file)
            if args.admin_token_file
            else os.environ.get("JPUSHARE_ADMIN_TOKEN") or os.environ.get("JPUSHARE_TOKEN")
        )
    except TokenFileError as e:
        print(f"jpushare replay: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    missing = [
        flag
        for flag, value in (
            ("--trace", args.trace),
            ("--server", args.server),
            ("--admin-token-file (or $JPUSHARE_ADMIN_TOKEN)", admin_token),
            ("--out", args.out),
        )
        if not value
    ]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")
    assert admin_token is not None
    try:
        jobs = load_trace(args.trace)
    except FormatError as e:
        print(f"jpushare replay: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not jobs:
        print(f"jpushare replay: {args.trace}: the trace has no jobs", file=sys.stderr)
        return EXIT_BAD_INPUT

    from jpushare.client.api import ApiError
    from jpushare.replay.runner import Replay, ReplayError, ReplayOptions, default_unix_user

    out: Path = args.out.resolve()
    options = ReplayOptions(
        trace=jobs,
        url=args.server,
        admin_token=admin_token,
        speed=args.speed,
        out=out,
        unix_user=args.unix_user or default_unix_user(),
        workdir=(args.workdir or out / "work").resolve(),
        allow_existing_jobs=args.allow_existing_jobs,
        placement=args.placement,
        cycle_s=args.cycle,
        progress=not args.no_progress,
    )
    try:
        doc = Replay(options).run()
    except ReplayError as e:
        print(f"jpushare replay: {e}", file=sys.stderr)
        return e.code
    except ApiError as e:
        print(f"jpushare replay: {e.code}: {e.message}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"jpushare replay: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # during the set-up or the final reads: nothing was running
        print("jpushare replay: interrupted", file=sys.stderr)
        return 130
    from jpushare.sim.report import comparison_text

    sys.stdout.write(comparison_text([doc]))
    sys.stdout.write(f"outputs in {out}\n")
    return 0


def run_compare(args: argparse.Namespace) -> int:
    from jpushare.formats.cluster_file import load_cluster
    from jpushare.formats.errors import FormatError
    from jpushare.formats.trace_file import check_tiers, load_trace
    from jpushare.replay.compare import CompareError, compare_dirs

    if (args.cluster is None) != (args.trace is None) or (args.cluster is None) == (
        args.sim is None
    ):
        print(
            "jpushare replay compare: give either --sim DIR, or --cluster and --trace",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    try:
        cluster = trace = None
        if args.cluster is not None:
            cluster = load_cluster(args.cluster)
            trace = load_trace(args.trace)
            check_tiers(trace, cluster.tiers, str(args.trace))
        report, _, _ = compare_dirs(
            args.sim, args.live, args.tolerance, args.out, cluster=cluster, trace=trace
        )
    except (CompareError, FormatError, KeyError, ValueError) as e:
        print(f"jpushare replay compare: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    sys.stdout.write(report)
    return 0
