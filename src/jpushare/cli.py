"""The `jpushare` command: one sub-command module per area, each with `register(sub)`.

A user command must answer at once (`squeue` does): `main` imports only the module that
defines the command it was given, so `jpushare queue` never imports the server's store,
SQLAlchemy, FastAPI or the simulator's matplotlib. `jpushare --help`, a bare `jpushare` and
a mistyped command import none of them either: the other commands are listed from
`COMMAND_HELP` (a test checks it against what the modules register). A closed pipe
(`jpushare show 1 --json | head -1`) ends any command quietly.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
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
            "squeue",
            "why",
            "wait",
            "cancel",
            "hold",
            "release",
            "update",
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

# Each command's one line in `jpushare --help` (the same words as its module's `help=`).
COMMAND_HELP: dict[str, str] = {
    "serve": "run the service: the API and the dispatcher",
    "init": "load tiers, nodes and labs from a cluster file into the database",
    "admin": "manage labs, users, tokens, nodes and tiers (server side)",
    "backfill": "keep an LLM inference server on every idle or reserved GPU (local or Slurm)",
    "submit": "queue a job: jpushare submit --gpus N [--min-tier T] -- CMD…",
    "jobs": "list jobs, newest first (as sacct: --since, --until, --format csv)",
    "show": "a job in full: command, times, attempts, costs",
    "cancel": "cancel jobs: by id, or by --state/--name/--user",
    "hold": "hold queued jobs: out of the queue until released",
    "release": "release held jobs: they queue from now",
    "update": "change a queued job's (or array's) --name or --time-limit",
    "wait": "wait until jobs end (or, with --started, leave the queue)",
    "queue": "the queue in fair-share order, with each job's why",
    "squeue": "running and queued jobs, as squeue shows them",
    "why": "why a job is not running (or what happened to it)",
    "log": "a job's output",
    "labs": "labs and their usage, least first (the fair-share order)",
    "placements": "GPUs per node and tier: busy, reserved, idle",
    "tiers": "GPU tiers, strongest first",
    "stats": "the watch-list: failed reservations, hold, multi-GPU burden",
    "web": "print (or --open) a link that signs you in to the web dashboard",
    "simulate": "replay a job trace on a cluster under a scheduling policy",
    "trace": "convert a real trace (philly, alibaba) to TRACE.csv; write example clusters",
    "replay": "drive a running service with a job trace; compare it with the simulator",
    "slurm-peer": "replay a trace through Slurm's own scheduler; compare runs job by job",
}

_DESCRIPTION = "Fair-share multi-GPU scheduler with reservations, in front of Slurm."


def build_parser(modules: Sequence[str] = COMMAND_MODULES) -> argparse.ArgumentParser:
    """The parser with every command of `modules`; the other commands are listed (for
    --help and argparse's "invalid choice") without importing the modules that define
    them."""
    parser = argparse.ArgumentParser(prog="jpushare", description=_DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in modules:
        importlib.import_module(name).register(sub)
    defined = set(sub.choices)
    for command in COMMANDS:
        if command not in defined:
            sub.add_parser(command, help=COMMAND_HELP[command], add_help=False)
    _order(sub)
    return parser


def _order(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """List the commands in COMMANDS' order whichever modules were imported."""
    rank = {name: i for i, name in enumerate(COMMANDS)}
    actions = sub._choices_actions
    actions.sort(key=lambda a: rank.get(a.dest, len(rank)))


def command_of(argv: Sequence[str]) -> str | None:
    """The command word of `argv` (its first argument: `jpushare` has no options of its own
    before the command but -h), or None."""
    for arg in argv:
        return None if arg.startswith("-") else arg
    return None


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command = command_of(words)
    module = COMMANDS.get(command or "")
    parser = build_parser((module,) if module else ())
    if not words:  # a bare `jpushare`: what there is, as `git` does
        parser.print_help()
        return 2
    if command is not None and module is None:
        near = difflib.get_close_matches(command, COMMANDS, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(near)}?" if near else "; `jpushare --help` lists them"
        parser.error(f"{command!r} is not a jpushare command{hint}")
    try:
        args = parser.parse_args(words)
        code: int = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:  # `jpushare show 1 --json | head -1`: the reader is gone
        _quiet_stdout()
        return 0
    return code


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of what is still
    buffered for the closed pipe does not print a traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
