"""Job arrays as sbatch writes them (`--array 0-15`, `1,3,5-9:2`, `0-99%4`): the task ids,
the throttle, and what each task is told (its variables, its output names). Pure.

An array is one submission that makes one job per task; each task's `array_job_id` is the
first task's job id (Slurm's ArrayJobId), and people name a task `ARRAY_TASK` (`12_3`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_ARRAY_TASKS = 1000  # tasks in one array (Slurm's default MaxArraySize is 1001)
MAX_TASK_ID = 99_999

_RANGE = re.compile(r"(\d{1,6})(?:-(\d{1,6})(?::(\d{1,6}))?)?")


def parse_array(text: str) -> tuple[tuple[int, ...], int | None]:
    """The task ids (sorted, each once) and the `%K` limit (None: no limit) of an
    `--array` value; ValueError with a sentence if it is not one."""
    spec, _, limit_text = text.strip().partition("%")
    limit: int | None = None
    if limit_text:
        if not limit_text.isdigit() or int(limit_text) < 1:
            raise ValueError(f"--array {text!r}: the limit after % must be a whole number >= 1")
        limit = int(limit_text)
    tasks: set[int] = set()
    for part in spec.split(","):
        m = _RANGE.fullmatch(part.strip())
        if m is None:
            raise ValueError(
                f"--array {text!r}: {part!r} is not N, N-M or N-M:STEP "
                "(e.g. 0-15, 1,3,5-9:2, 0-99%4)"
            )
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        step = int(m.group(3)) if m.group(3) is not None else 1
        if last < first or step < 1:
            raise ValueError(f"--array {text!r}: {part!r} is an empty range")
        if last > MAX_TASK_ID:
            raise ValueError(f"--array {text!r}: task ids go up to {MAX_TASK_ID}")
        tasks.update(range(first, last + 1, step))
        if len(tasks) > MAX_ARRAY_TASKS:
            raise ValueError(f"--array {text!r}: at most {MAX_ARRAY_TASKS} tasks in one array")
    return tuple(sorted(tasks)), limit


def task_variables(array_job_id: int, task: int, tasks: tuple[int, ...]) -> dict[str, str]:
    """The variables a task runs with, Slurm's and their JPUSHARE_* twins."""
    values = {
        "ARRAY_JOB_ID": str(array_job_id),
        "ARRAY_TASK_ID": str(task),
        "ARRAY_TASK_COUNT": str(len(tasks)),
        "ARRAY_TASK_MIN": str(tasks[0]),
        "ARRAY_TASK_MAX": str(tasks[-1]),
    }
    return {f"{prefix}_{k}": v for prefix in ("SLURM", "JPUSHARE") for k, v in values.items()}


def task_environment(
    environment: Mapping[str, str] | None, array_job_id: int, task: int, tasks: tuple[int, ...]
) -> dict[str, str]:
    """A task's environment: the submitted one plus `task_variables` (they win)."""
    return {**(environment or {}), **task_variables(array_job_id, task, tasks)}


def expand_percent(pattern: str, values: Mapping[str, str]) -> str:
    """Each `%x` whose `x` is in `values` -> `values[x]`; any other `%x` stays as written
    (so `%%` too, unless `values` maps `%`)."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern[i] == "%" and i + 1 < len(pattern):
            out.append(values.get(pattern[i + 1], pattern[i : i + 2]))
            i += 2
        else:
            out.append(pattern[i])
            i += 1
    return "".join(out)


def task_pattern(pattern: str, array_job_id: int, task: int) -> str:
    """An output name for one task: `%A` the array's id, `%a` the task id (sbatch's
    meaning in an array); `%j` and `%%` are left for the executor to expand."""
    return expand_percent(pattern, {"A": str(array_job_id), "a": str(task)})


DEFAULT_ARRAY_OUTPUT = "jpushare-%A_%a.out"  # as Slurm's slurm-%A_%a.out
