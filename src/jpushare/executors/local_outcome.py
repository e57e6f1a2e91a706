"""How the local executor names the end of a run whose processes are all gone (step 3 of
`executors.local`'s docstring): CANCELLED or TIMEOUT when it was stopped; else by exit code
— 0 COMPLETED; non-zero OOM when its memory cgroup saw an OOM kill, or when the output's
tail (this attempt's part) reports a CUDA out-of-memory (SPEC §5: the reason is a fixed
sentence, never the job's own words, which may hold anything), else FAILED; no exit code at
all FAILED (killed from outside), or NODE_FAIL when the machine rebooted under it.

The files are read only where the answer needs them (`not_started`, `output_tail` are
called lazily), in the order the rules are tried.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from jpushare.executors.base import RunState
from jpushare.executors.cuda_oom import CUDA_OOM_REASON, OOM_SCAN_BYTES, find_cuda_oom
from jpushare.executors.local_records import RunRecord, account_of
from jpushare.executors.output_files import OutputUnreadable, file_size, read_tail

log = logging.getLogger("jpushare.executors.local")


def run_outcome(
    stop_reason: str | None,
    time_limit_s: float | None,
    exit_code: int | None,
    launch: Mapping[str, Any],
    *,
    rebooted: bool,
    oom_kills: int,
    not_started: Callable[[], str | None],
    output_tail: Callable[[], str],
) -> tuple[RunState, str | None]:
    """The run's final state and reason (the module docstring)."""
    if stop_reason == "cancel":
        return RunState.CANCELLED, "cancelled"
    if stop_reason == "timeout":
        return RunState.TIMEOUT, f"time limit of {time_limit_s:g} s reached"
    if exit_code is None and rebooted:
        return RunState.NODE_FAIL, "the machine restarted while the job ran"
    if exit_code != 0 and oom_kills and launch.get("mem_bytes"):
        limit = mib(launch["mem_bytes"])
        return RunState.OOM, f"killed: the job's memory limit of {limit} was reached"
    if exit_code is None:
        return RunState.FAILED, (
            "the job's processes ended without an exit code (killed from outside?)"
        )
    if exit_code == 0:
        return RunState.COMPLETED, None
    if (refused := not_started()) is not None:
        return RunState.FAILED, refused[:1000]
    if find_cuda_oom(output_tail()) is not None:
        return RunState.OOM, CUDA_OOM_REASON  # never the job's words
    return RunState.FAILED, signal_reason(exit_code, output_full(launch, exit_code))


def attempt_tail(rec: RunRecord, old_log: Path) -> str:
    """What this attempt wrote at the end of its output and error files (read as the job's
    owner: they are the owner's files). `old_log`: where a run from before launches wrote."""
    launch = rec.launch
    if launch is None:  # a run started by a version before launches
        files = [(str(old_log), 0)]
        account = None
    else:
        files = [(launch["output"], rec.output_offset)]
        if launch.get("error") is not None:
            files.append((launch["error"], rec.error_offset))
        account = None if launch["output_by_service"] else account_of(launch)
    texts = []
    for path, start in files:
        try:
            tail = read_tail(path, account, OOM_SCAN_BYTES, start)
        except OutputUnreadable as exc:
            log.warning("OOM check of %s: %s", path, exc)
            continue
        if tail is not None:
            texts.append(tail.data.decode("utf-8", errors="replace"))
    return "\n".join(texts)


def signal_reason(exit_code: int, fsize_bytes: int | None = None) -> str:
    """Why a run that exited `exit_code` failed; `fsize_bytes`: its output was full."""
    if fsize_bytes:
        return (
            f"a file the job wrote reached the output size limit of {mib(fsize_bytes)} "
            f"(exit code {exit_code})"
        )
    if exit_code > 128:
        try:
            name = signal.Signals(exit_code - 128).name
        except ValueError:
            name = f"signal {exit_code - 128}"
        if name == "SIGKILL":
            return f"killed by SIGKILL (exit code {exit_code}; perhaps the out-of-memory killer)"
        return f"killed by {name} (exit code {exit_code})"
    return f"exited with code {exit_code}"


def output_full(launch: Mapping[str, Any], exit_code: int) -> int | None:
    """The output size limit, when the run was stopped by it: SIGXFSZ killed it, or it
    failed (a writer that ignores SIGXFSZ, as Python does, gets EFBIG) with an output file
    at the limit. `stat` opens nothing: fine as root."""
    limit = launch.get("fsize_bytes")
    if not limit:
        return None
    files = [launch.get("output"), launch.get("error")]
    if exit_code == 128 + signal.SIGXFSZ or any(
        f is not None and file_size(f) >= limit for f in files
    ):
        return int(limit)
    return None


def mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"
