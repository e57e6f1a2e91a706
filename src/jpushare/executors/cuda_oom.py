"""Recognising a CUDA out-of-memory in a job's output (SPEC §5 escalation), for every executor.

Pure: text in, the matching line out. Executors read the tail of a run's log and pass it
here; a run that ended non-zero with such a line is an OOM, not a plain failure. The
reason they record is `CUDA_OOM_REASON`, never the line: a job's output may hold anything
(a password it printed), and a run's reason is shown to every user.
"""

from __future__ import annotations

import re

# PyTorch: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate …" (2.5+),
# "torch.cuda.OutOfMemoryError: …" (1.13–2.4), "RuntimeError: CUDA out of memory." (older);
# the CUDA runtime itself: "CUDA error: out of memory"; TensorFlow/XLA: "RESOURCE_EXHAUSTED:
# Out of memory while trying to allocate".
CUDA_OOM_PATTERN = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"
    r"|RESOURCE_EXHAUSTED: Out of memory",
)

# The public reason of a run ended by a CUDA out-of-memory: fixed, never the job's output.
CUDA_OOM_REASON = "CUDA out of memory (reported in the job's output)"

# How much of a log's end executors scan: the traceback of an OOM is at the end.
OOM_SCAN_BYTES = 1 << 20


def last_line_matching(output: str, pattern: re.Pattern[str]) -> str | None:
    """The last line of `output` that `pattern` finds in, stripped; else None (the host
    out-of-memory of `slurm_parse` too)."""
    found: str | None = None
    for line in output.splitlines():
        if pattern.search(line):
            found = line.strip()
    return found


def find_cuda_oom(output: str) -> str | None:
    """The last line of `output` that reports a CUDA out-of-memory, stripped; else None."""
    return last_line_matching(output, CUDA_OOM_PATTERN)
