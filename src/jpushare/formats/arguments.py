"""The command-line arguments that name the two input files and the replay speed.

`jpushare simulate`, `replay`, `replay compare` and `slurm-peer run` all take a trace on a
cluster; here each of those arguments is written once, so the commands spell, check and
explain them alike. Here, not in one of those commands: `formats` is the lowest layer all of
them may import (pyproject.toml's import contracts), and it imports nothing heavy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

CLUSTER_HELP = "CLUSTER.yaml (docs/formats.md)"
TRACE_HELP = "TRACE.csv (docs/formats.md)"
SPEED_HELP = "trace seconds per wall second (60: a trace hour takes a wall minute"


def _number(raw: str, *, zero: bool, unit: str = "") -> float:
    """A finite float above 0 (or at least 0 where `zero`), else an argparse usage error."""
    of = f" of {unit}" if unit else ""
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number{of}: {raw!r}") from None
    ok = value >= 0 if zero else value > 0
    if not ok or value == float("inf"):
        bound = ">= 0" if zero else "> 0"
        raise argparse.ArgumentTypeError(
            f"must be {bound}{' ' + unit if unit else ''}, got {raw!r}"
        )
    return value


def positive(raw: str) -> float:
    """argparse type: a number > 0 (a speed, a tolerance)."""
    return _number(raw, zero=False)


def not_negative(raw: str) -> float:
    """argparse type: a number >= 0."""
    return _number(raw, zero=True)


def positive_seconds(raw: str) -> float:
    """argparse type: a number of seconds > 0 (a cycle)."""
    return _number(raw, zero=False, unit="seconds")


def add_trace_arguments(
    parser: argparse.ArgumentParser,
    *,
    required: bool = True,
    cluster: str | None = CLUSTER_HELP,
    trace: str = TRACE_HELP,
    speed: bool = False,
    default_speed: float | None = None,
) -> None:
    """Add `--cluster CLUSTER.yaml`, `--trace TRACE.csv` and `--speed S`, in that order.

    `required`: argparse demands them (a command with actions of its own checks for itself);
    `cluster`, `trace`: their help, where the command says more (`cluster=None`: the command
    takes no cluster file); `speed`: the command takes --speed, required unless it has a
    `default_speed`.
    """
    if cluster is not None:
        parser.add_argument("--cluster", required=required, type=Path, help=cluster)
    parser.add_argument("--trace", required=required, type=Path, help=trace)
    if speed:
        parser.add_argument(
            "--speed",
            required=required and default_speed is None,
            type=positive,
            default=default_speed,
            help=f"{SPEED_HELP})"
            if default_speed is None
            else f"{SPEED_HELP}; default {default_speed:g})",
        )
