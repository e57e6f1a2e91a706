"""What `sacct --parsable2` prints about the peer's jobs, parsed (pure: text in, records out).

The driver runs `sacct -X -n --parsable2 -j IDS -o SACCT_FORMAT` with `TZ=UTC0` and
`SLURM_TIME_FORMAT=standard`, as the executor runs every Slurm command, so times are
`2026-12-01T16:25:59` in UTC: whole seconds, Slurm keeps no finer time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, tzinfo

from jpushare.executors.slurm_parse import (
    allocation_rows,
    job_state_word,
    parse_time,
    text_or_none,
)

#: The fields the driver asks for, in this order. The name goes last: it may hold a "|".
SACCT_FIELDS = (
    "JobID",
    "Account",
    "State",
    "ExitCode",
    "Submit",
    "Start",
    "End",
    "NodeList",
    "AllocTRES",
    "TimelimitRaw",
    "JobName",
)
SACCT_FORMAT = ",".join(SACCT_FIELDS)

#: States after which a job no longer changes.
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "NODE_FAIL",
        "BOOT_FAIL",
        "DEADLINE",
        "PREEMPTED",
    }
)

_GPU_TRES = re.compile(r"gres/gpu:([^=,]+)=(\d+)")


@dataclass(frozen=True, slots=True)
class SacctJob:
    """One allocation as sacct records it. Times are UNIX seconds (None: not yet / never)."""

    slurm_id: str
    account: str
    state: str  # Slurm's word: COMPLETED, CANCELLED (from `CANCELLED by 0`), …
    exit_code: str
    submit: float | None
    start: float | None
    end: float | None
    nodes: str | None
    gpus: dict[str, int]  # allocated GPUs per GRES type (empty: none allocated)
    time_limit_min: int | None
    name: str

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def ran(self) -> bool:
        """It was started on a node (a job cancelled while pending has no start)."""
        return self.start is not None and self.nodes is not None


def alloc_gpus(tres: str) -> dict[str, int]:
    """`billing=209,cpu=1,gres/gpu:rtx5090=2,gres/gpu=2,mem=500M,node=1` -> {rtx5090: 2}.

    The typed entries only: `gres/gpu=2` is their sum. A job given GPUs of two types (an
    untyped request on a mixed node) has one entry per type."""
    return {m.group(1): int(m.group(2)) for m in _GPU_TRES.finditer(tres)}


def parse_sacct(text: str, tz: tzinfo = UTC) -> list[SacctJob]:
    """`sacct -X -n --parsable2 -o SACCT_FORMAT` -> allocations, in sacct's order.

    Step rows (`12.batch`) and array or heterogeneous members (`12_3`, `12+1`) are skipped;
    so is a line with too few fields. `Unknown` / `None` times are None; a pending job's
    `Start` is Slurm's *expected* start only in squeue, never in sacct, so it reads None.
    """
    jobs: list[SacctJob] = []
    for fields in allocation_rows(text, len(SACCT_FIELDS)):
        sid, account, state, exit_code, submit, start, end, nodes, tres, limit, name = fields
        limit_v = limit.strip()
        jobs.append(
            SacctJob(
                slurm_id=sid,
                account=account.strip(),
                state=job_state_word(state),
                exit_code=exit_code.strip(),
                submit=parse_time(submit, tz),
                start=parse_time(start, tz),
                end=parse_time(end, tz),
                nodes=text_or_none(nodes),
                gpus=alloc_gpus(tres),
                time_limit_min=int(limit_v) if limit_v.isdigit() else None,
                name=name,
            )
        )
    return jobs
