"""The time limits a simulated job carries (`jpushare simulate --limits`): so that policies
that read limits (`backfill`, and every comparison with Slurm) are compared with the same
knowledge. No I/O; the `user` model is seeded, so a run is reproducible.

- `exact`: every job's limit is its run (perfect knowledge);
- `trace`: the trace's `time_limit`, or the run where the trace gives none (the default,
  what the simulator always did);
- `user:SEED`: a user's estimate drawn per job (docs/formats.md §3.1): a factor of 2 to 10
  times the run from a truncated Pareto (heavy tail: most estimates near 2-4x, some near
  10x), rounded up to the next round value a person types (5, 10, 15, 20, 30, 45 min, then
  1, 2, 3, 4, 6, 8, 12, 16, 24, 36, 48, 72 h and whole days);
- `none`: no job has a limit (an infinite one: no backfill can rely on an end).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace

from jpushare.formats.trace_file import TraceJob

LIMIT_MODES = ("exact", "trace", "user:SEED", "none")
# Round values users ask for, in seconds (then whole days beyond the last).
ROUND_LIMITS_S: tuple[float, ...] = tuple(
    [m * 60.0 for m in (5, 10, 15, 20, 30, 45)]
    + [h * 3600.0 for h in (1, 2, 3, 4, 6, 8, 12, 16, 24, 36, 48, 72)]
)
USER_FACTOR_MIN = 2.0
USER_FACTOR_MAX = 10.0
USER_PARETO_ALPHA = 1.5


def round_up(seconds: float) -> float:
    """The smallest round value (`ROUND_LIMITS_S`, then whole days) at or above `seconds`."""
    for value in ROUND_LIMITS_S:
        if value >= seconds:
            return value
    return math.ceil(seconds / 86400.0) * 86400.0


def user_factor(rnd: random.Random) -> float:
    """A user's overestimate factor: Pareto(alpha 1.5) from 2, truncated at 10."""
    u = rnd.random()
    factor: float = USER_FACTOR_MIN * (1.0 - u) ** (-1.0 / USER_PARETO_ALPHA)
    return min(USER_FACTOR_MAX, factor)


def parse_limits(text: str) -> tuple[str, int | None]:
    """`exact` / `trace` / `user:SEED` / `none` -> (mode, seed); ValueError names them."""
    mode, _, seed = text.strip().lower().partition(":")
    if mode in ("exact", "trace", "none") and not seed:
        return mode, None
    if mode == "user" and seed.isdigit():
        return mode, int(seed)
    raise ValueError(f"--limits must be one of {', '.join(LIMIT_MODES)}, not {text!r}")


def with_limits(jobs: Sequence[TraceJob], text: str) -> list[TraceJob]:
    """The jobs with the time limits of mode `text` (see the module docstring)."""
    mode, seed = parse_limits(text)
    if mode == "trace":
        return list(jobs)
    if mode == "exact":
        return [replace(j, time_limit=j.duration) for j in jobs]
    if mode == "none":
        return [replace(j, time_limit=math.inf) for j in jobs]
    rnd = random.Random(seed)
    return [replace(j, time_limit=round_up(j.duration * user_factor(rnd))) for j in jobs]
