"""The CLI's argument types: job ids, GPU counts, states (Slurm's names and short forms
too), times, sizes and numbers, each refused in the user's words and units (argparse
prints the message with the option's name; exit 2). Standard library only: `--help` must
start at once."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from jpushare.memory_sizes import format_mem_mb, parse_mem_mb
from jpushare.run_settings import MAX_MEM_PER_GPU_MB, MIN_MEM_PER_GPU_MB
from jpushare.time_limits import TimeLimitError, parse_time_limit
from jpushare.vocabulary import JobState


class UsageError(Exception):
    """Bad arguments that argparse could not catch (exit 2)."""


JOB_STATES = tuple(JobState)
# Our words, then Slurm's state names and squeue's short forms (squeue -t, sacct -s).
STATE_ALIASES: dict[str, JobState] = {
    "QUEUED": JobState.GLOBAL_QUEUE_WAIT,
    "WAITING": JobState.GLOBAL_QUEUE_WAIT,
    "PENDING": JobState.GLOBAL_QUEUE_WAIT,
    "PD": JobState.GLOBAL_QUEUE_WAIT,
    "CONFIGURING": JobState.DISPATCHED,
    "CF": JobState.DISPATCHED,
    "R": JobState.RUNNING,
    "CD": JobState.COMPLETED,
    "F": JobState.FAILED,
    "CA": JobState.CANCELLED,
    "CANCELED": JobState.CANCELLED,
}


def job_id(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a job id: {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a job id: {raw!r}")
    return value


@dataclass(frozen=True, slots=True)
class JobRef:
    """A job as a Slurm user names it: `ID` (a job; an array's id: every task, where the
    command takes several) or `ID_TASK` (one task of the array ID)."""

    job: int
    task: int | None = None

    def __str__(self) -> str:
        return str(self.job) if self.task is None else f"{self.job}_{self.task}"


def job_ref(raw: str) -> JobRef:
    """`12` or `12_3` (argparse's type)."""
    head, sep, task = raw.partition("_")
    try:
        ref = JobRef(int(head), int(task) if sep else None)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a job id (ID or ARRAY_TASK): {raw!r}") from None
    if ref.job < 1 or (ref.task is not None and ref.task < 0):
        raise argparse.ArgumentTypeError(f"not a job id (ID or ARRAY_TASK): {raw!r}")
    return ref


def job_refs(raw: str) -> list[JobRef]:
    """`12,13_2` (sacct -j's list; argparse's type)."""
    return [job_ref(part) for part in raw.split(",") if part]


def gpus(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of GPUs: {raw!r}") from None


GpuAsk = tuple[str | None, int]
"""A GPU request as sbatch writes it: (the GPU type, i.e. a tier, or None; how many)."""


def typed_gpus(raw: str) -> GpuAsk:
    """sbatch's --gpus / --gpus-per-node: `N` or `TYPE:N` (TYPE: a tier, e.g. rtx5090:2)."""
    kind, _, count = raw.rpartition(":")
    return (kind or None, _count(count, raw, "e.g. 2 or rtx5090:2"))


def gres(raw: str) -> GpuAsk:
    """sbatch's --gres for GPUs: `gpu:N` or `gpu:TYPE:N` (one resource: GPUs)."""
    parts = raw.split(":")
    if parts[0] != "gpu" or not 2 <= len(parts) <= 3:
        raise argparse.ArgumentTypeError(
            f"{raw!r}: only GPUs are a resource here: gpu:N or gpu:TYPE:N (e.g. gpu:rtx5090:2)"
        )
    return (parts[1] if len(parts) == 3 else None, _count(parts[-1], raw, "gpu:2, gpu:rtx5090:2"))


def _count(text: str, raw: str, example: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a number of GPUs: {raw!r} ({example})")
    return int(text)


def state(raw: str) -> str:
    value = STATE_ALIASES.get(raw.upper(), raw.upper())
    if value not in JOB_STATES:
        raise argparse.ArgumentTypeError(
            f"unknown state {raw!r} (one of: {', '.join(JOB_STATES)}; or QUEUED, or Slurm's "
            "PENDING/PD, R, CD, F, CA)"
        )
    return value


def positive(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number (NaN): give seconds, e.g. 30")
    if math.isinf(value):
        raise argparse.ArgumentTypeError(f"{raw!r} is infinite: give seconds, e.g. 3600")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {raw!r}")
    return value


def time_limit(raw: str) -> float:
    """--time-limit as sbatch's --time: `90` (minutes), `1:30:00`, `2-00:00:00`, `1h30m`."""
    try:
        return parse_time_limit(raw)
    except TimeLimitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cpus(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a CPU count: {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1 CPU per GPU, not {value}")
    return value


def mem(raw: str) -> int:
    """--mem-per-gpu, checked here so that the bound reads in sbatch's units (4T, not MiB)."""
    try:
        value = parse_mem_mb(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value > MAX_MEM_PER_GPU_MB:
        raise argparse.ArgumentTypeError(
            f"{raw!r} is too much: at most {format_mem_mb(MAX_MEM_PER_GPU_MB)} per GPU"
        )
    if value < MIN_MEM_PER_GPU_MB:
        raise argparse.ArgumentTypeError(
            f"{raw!r} is too little: at least {format_mem_mb(MIN_MEM_PER_GPU_MB)} per GPU"
        )
    return value
