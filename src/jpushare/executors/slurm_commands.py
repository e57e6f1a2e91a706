"""How the Slurm executor runs Slurm's client commands, and what their failures mean.

`SlurmCommands` names the commands (looked up on PATH), `CommandRunner` runs one (the real
one: `run_command`, a subprocess without a shell; tests script their own), and
`SlurmError` is a failure that says nothing about the job. The patterns tell a controller
that did not answer (`TRANSIENT`) and a job that is already gone (`ALREADY_GONE`) from the
rest.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


class SlurmError(RuntimeError):
    """A Slurm command failed or timed out for a reason other than refusing our job.

    Unlike SubmitRefused this says nothing about the job: after a failed or timed-out
    sbatch it may exist. The dispatcher retries; `submit` is idempotent.
    """


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a Slurm command answered."""

    returncode: int
    stdout: str
    stderr: str


#: Runs argv with stdin text, environment and a timeout (raises subprocess.TimeoutExpired).
CommandRunner = Callable[[Sequence[str], str | None, Mapping[str, str], float], CommandResult]


def run_command(
    argv: Sequence[str], stdin: str | None, env: Mapping[str, str], timeout_s: float
) -> CommandResult:
    """The real CommandRunner: subprocess, text, no shell."""
    proc = subprocess.run(
        list(argv),
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        env=dict(env),
        timeout=timeout_s,
        check=False,
    )
    return CommandResult(proc.returncode, proc.stdout, proc.stderr)


@dataclass(frozen=True, slots=True)
class SlurmCommands:
    """Where Slurm's client commands are (names are looked up on PATH)."""

    sbatch: str = "sbatch"
    squeue: str = "squeue"
    sinfo: str = "sinfo"
    scancel: str = "scancel"
    sacct: str = "sacct"


# sbatch failures that say nothing about the job itself: the controller did not answer.
TRANSIENT = re.compile(
    r"Socket timed out|Unable to contact slurm controller|Connection refused"
    r"|Zero Bytes were transmitted|Transport endpoint|temporarily unable to accept"
    r"|Resource temporarily unavailable|Communication connection failure",
    re.IGNORECASE,
)
# scancel answers for a job that is already gone: cancel is idempotent.
ALREADY_GONE = re.compile(
    r"already completing or completed|Invalid job id specified|Job has already finished",
    re.IGNORECASE,
)
