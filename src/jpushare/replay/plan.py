"""What a replay does and when, as pure values: no clock, no HTTP.

Trace time t (seconds) happens at real time t0 + t / speed. Each trace job becomes one
submission at its scaled `submit_time` and, when it has one, one cancel at its scaled
`cancel_time` (a submission before a cancel at the same instant, as in the simulator,
where a cancel due before the submitting cycle still finds the job).

A job's command sleeps its scaled duration. A job with `oom_on` cannot know by itself
which tier it landed on (the executors tell a job its node, not its tier), so after its
sleep it waits for a *marker* the replay writes once it has seen the attempt's placement
in the service's records: `<attempt>.oom` (print PyTorch's CUDA out-of-memory error and
exit 1, which every executor reads as an OOM) or `<attempt>.ok` (exit 0).
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from jpushare.formats.trace_file import TraceJob

# What PyTorch 2.5+ prints; `executors/cuda_oom.py` recognises it in the job's output.
OOM_MESSAGE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 23.53 GiB of which 1.12 GiB is free."
)
MARKER_DIR = "replay-markers"  # inside the jobs' working directory
MARKER_WAIT_S = 120  # an oom_on job whose marker never comes (replay gone) ends as if ok


class ActionKind(StrEnum):
    SUBMIT = "submit"
    CANCEL = "cancel"


@dataclass(frozen=True, slots=True)
class Action:
    """Do `kind` to trace job `index` (its position in the trace) at t0 + `at_s`."""

    at_s: float
    kind: ActionKind
    index: int


def scaled(trace_s: float, speed: float) -> float:
    """Trace seconds -> real seconds."""
    return trace_s / speed


def actions(jobs: Sequence[TraceJob], speed: float) -> list[Action]:
    """Every submission and cancel in real-time order (submissions first at equal times,
    then trace order)."""
    out = [Action(scaled(j.submit_time, speed), ActionKind.SUBMIT, i) for i, j in enumerate(jobs)]
    out += [
        Action(scaled(j.cancel_time, speed), ActionKind.CANCEL, i)
        for i, j in enumerate(jobs)
        if j.cancel_time is not None
    ]
    order = {ActionKind.SUBMIT: 0, ActionKind.CANCEL: 1}
    return sorted(out, key=lambda a: (a.at_s, order[a.kind], a.index))


def sleep_s(job: TraceJob, speed: float) -> str:
    """The scaled duration as `sleep` takes it (millisecond resolution)."""
    return f"{scaled(job.duration, speed):.3f}"


def time_limit_s(job: TraceJob, speed: float) -> float | None:
    """The trace's `time_limit`, scaled as the run is, for the service to enforce (the
    same limit Slurm gets in a race, so both schedulers know the same); None when the
    trace gives none. At least 1 s, the API's least, so it never ends before the run."""
    if job.time_limit is None:
        return None
    return max(1.0, math.ceil(scaled(job.time_limit, speed) * 1000) / 1000)


def marker(service_id: int, attempt: int, oom: bool) -> str:
    """The marker's path relative to the working directory."""
    return f"{MARKER_DIR}/{service_id}-{attempt}.{'oom' if oom else 'ok'}"


def job_command(job: TraceJob, speed: float) -> str:
    """The bash command the service runs for `job`."""
    sleep = f"sleep {sleep_s(job, speed)}"
    if not job.oom_on:
        return sleep
    m = f'{MARKER_DIR}/"$JPUSHARE_JOB_ID-$JPUSHARE_ATTEMPT"'
    message = shlex.quote(f"{OOM_MESSAGE} (jpushare replay: trace job {job.job_id})")
    return (
        f"{sleep}; n=0; "
        f"while [ ! -e {m}.oom ] && [ ! -e {m}.ok ] && [ $n -lt {MARKER_WAIT_S * 20} ]; "
        "do sleep 0.05; n=$((n+1)); done; "
        f"if [ -e {m}.oom ]; then echo {message} >&2; exit 1; fi"
    )


def user_name(lab: str) -> str:
    """The replay user of a lab: `replay-` and the lab in lower case (`NLP` -> `replay-nlp`),
    with anything but letters, digits, `.`, `_` and `-` made `-`."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", lab.lower()).strip("-") or "lab"
    return f"replay-{slug}"[:100]


def user_names(labs: Sequence[str]) -> dict[str, str]:
    """lab -> replay user, distinct even where two labs' slugs coincide."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for lab in sorted(set(labs)):
        name = base = user_name(lab)
        n = 2
        while name in taken:
            name = f"{base[:95]}-{n}"
            n += 1
        taken.add(name)
        out[lab] = name
    return out
