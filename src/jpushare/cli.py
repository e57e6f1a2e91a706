"""The `jpushare` command: one sub-command module per area, each with `register(sub)`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module defines register(subparsers) and sets `func` (args -> exit code) on its parsers.
COMMAND_MODULES: tuple[str, ...] = (
    "jpushare.service.cli",  # serve, init, admin (server side, talks to the database)
    "jpushare.client.cli",  # submit, jobs, queue, why, cancel, log, labs, placements, tiers, stats
    "jpushare.sim.cli",  # simulate
    "jpushare.traces.cli",  # trace (real trace loaders)
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jpushare",
        description="Fair-share multi-GPU scheduler with reservations, in front of Slurm.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
