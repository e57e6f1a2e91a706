"""The reservation policy's operator options beyond the placement order (SPEC decision 7,
"Options beyond the note"): which job is the top job, and what reserved GPUs may run.

No I/O. The service reads them from `JPUSHARE_TOP_JOB` / `JPUSHARE_RESERVED_GPUS`, the
simulator from `--top-job` / `--reserved-gpus`; both pass them to `decide`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

Choice = TypeVar("Choice", bound=StrEnum)


class TopJob(StrEnum):
    """Which job R2 and R3 refer to (SPEC decision 7)."""

    FIRST_WAITING = "first-waiting"  # the first job of the order that cannot start (default)
    FIRST_QUEUED = "first-queued"  # queue[0], the note's literal reading


class ReservedGpus(StrEnum):
    """What may run on GPUs a reservation holds (R4, and the lending option)."""

    LLM_ONLY = "llm-only"  # R4: closed to every other research job (default)
    LEND_BY_LIMIT = "lend-by-limit"  # a job whose time limit ends before the fill may run


TOP_JOBS: tuple[str, ...] = tuple(o.value for o in TopJob)
RESERVED_GPUS: tuple[str, ...] = tuple(o.value for o in ReservedGpus)


def parse_choice(kind: type[Choice], name: str, text: str) -> Choice:
    """`text` (any case) as one of `kind`'s values; ValueError naming the valid choices.
    The one parser of every option here and of the placement order."""
    try:
        return kind(text.strip().lower())
    except ValueError:
        choices = ", ".join(o.value for o in kind)
        raise ValueError(f"{name} must be one of {choices}, not {text!r}") from None


def parse_top_job(text: str) -> TopJob:
    """`first-waiting` / `first-queued` -> TopJob; ValueError naming the valid choices."""
    return parse_choice(TopJob, "top_job", text)


def parse_reserved_gpus(text: str) -> ReservedGpus:
    """`llm-only` / `lend-by-limit` -> ReservedGpus; ValueError naming the valid choices."""
    return parse_choice(ReservedGpus, "reserved_gpus", text)
