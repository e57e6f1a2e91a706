"""The `jpushare` command: one sub-command module per area, each with `register(sub)`.

A user command must answer at once (`squeue` does): `main` imports only the module that
defines the command it was given, so `jpushare queue` never imports the server's store,
SQLAlchemy, FastAPI or the simulator's matplotlib. Only `jpushare --help` (or a command
nobody defines) imports them all, to list every command.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module defines register(subparsers) and sets `func` (args -> exit code) on its parsers.
COMMAND_MODULES: tuple[str, ...] = (
    "jpushare.service.cli",  # serve, init, admin (server side, talks to the database)
    "jpushare.client.cli",  # submit, jobs, show, queue, why, wait, cancel, log, labs, …
    "jpushare.sim.cli",  # simulate
    "jpushare.traces.cli",  # trace (real trace loaders)
    "jpushare.replay.cli",  # replay (a trace through a running service)
    "jpushare.slurm_peer.cli",  # slurm-peer (a trace through Slurm's own scheduler)
)

# Which module defines each command (a test checks this against what the modules register).
COMMANDS: dict[str, str] = {
    **dict.fromkeys(("serve", "init", "admin", "backfill"), "jpushare.service.cli"),
    **dict.fromkeys(
        (
            "submit",
            "jobs",
            "show",
            "queue",
            "why",
            "wait",
            "cancel",
            "log",
            "labs",
            "placements",
            "tiers",
            "stats",
            "web",
        ),
        "jpushare.client.cli",
    ),
    "simulate": "jpushare.sim.cli",
    "trace": "jpushare.traces.cli",
    "replay": "jpushare.replay.cli",
    "slurm-peer": "jpushare.slurm_peer.cli",
}

_DESCRIPTION = "Fair-share multi-GPU scheduler with reservations, in front of Slurm."


def build_parser(modules: Sequence[str] = COMMAND_MODULES) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jpushare", description=_DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in modules:
        importlib.import_module(name).register(sub)
    return parser


def command_of(argv: Sequence[str]) -> str | None:
    """The command word of `argv` (its first argument: `jpushare` has no options of its own
    before the command but -h), or None."""
    for arg in argv:
        return None if arg.startswith("-") else arg
    return None


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    module = COMMANDS.get(command_of(words) or "")
    parser = build_parser((module,) if module else COMMAND_MODULES)
    args = parser.parse_args(words)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
