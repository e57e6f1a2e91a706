"""What a test job does, said once for every executor.

A `Script` prints, takes time and ends; `shell` writes it as the bash command the local and
Slurm executors run, and the in-memory executor (tests/memory_executor.py) plays it without
a process. A `Hold` is a job that runs until the test releases it: a flag file the command
waits for on real executors, a gate in memory.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

# The line PyTorch prints on a CUDA out-of-memory (what every executor must recognise).
CUDA_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 23.55 GiB of which 1.02 GiB is free."
)

FOREVER_S = 30  # what "until cancelled" sleeps on a real executor: a bound if a cancel fails


@dataclass(frozen=True)
class Script:
    """Print `output` (stdout) and `error` (stderr) lines, run `seconds`, exit `exit_code`.

    `seconds` None: run until cancelled. The texts may name the job's variables
    ($JPUSHARE_JOB_ID, $CUDA_VISIBLE_DEVICES …) as a double-quoted shell echo would.
    """

    output: str = ""
    error: str = ""
    seconds: float | None = 0.0
    exit_code: int = 0


def shell(script: Script) -> str:
    """The bash command that does what `script` says."""
    parts = []
    for text, redirect in ((script.output, ""), (script.error, " >&2")):
        if text:
            assert not set(text) & set('"\\`'), f"not for a double-quoted echo: {text!r}"
            parts.append(f'echo "{text}"{redirect}')
    if script.seconds is None:
        parts.append(f"sleep {FOREVER_S}")
    elif script.seconds:
        parts.append(f"sleep {script.seconds:g}")
    if script.exit_code:
        parts.append(f"exit {script.exit_code}")
    return "; ".join(parts) or "true"


class Hold(Protocol):
    """A job command that runs until `release()`."""

    @property
    def command(self) -> str: ...

    def release(self) -> None: ...


@dataclass(frozen=True)
class FlagHold:
    """A real job that polls for a flag file; `release` creates it."""

    flag: Path
    poll_s: float = 0.05

    @property
    def command(self) -> str:
        return f"while [ ! -e {shlex.quote(str(self.flag))} ]; do sleep {self.poll_s:g}; done"

    def release(self) -> None:
        self.flag.touch()
