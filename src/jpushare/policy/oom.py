"""OOM escalation (SPEC §5, S10): an out-of-memory job retries on the next stronger tier.

No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from jpushare.policy.fit import fits
from jpushare.policy.model import Placement, Tier


@dataclass(frozen=True, slots=True)
class Escalation:
    """Requeue with a higher minimum tier, or fail with a reason a person can read."""

    requeue: bool
    min_sort_order: int | None  # the new minimum when requeued
    next_tier: str | None
    reason: str


def escalate(
    num_gpus: int,
    ran_on_tier: str,
    tiers: Iterable[Tier],
    placements: Iterable[Placement],
) -> Escalation:
    """The minimum rises to the next auto-assign tier above the one the job ran out of memory on.

    If no placement fits at that minimum (or no stronger tier exists) the job fails.
    """
    tier_list = list(tiers)
    by_name = {t.name: t for t in tier_list}
    ran = by_name.get(ran_on_tier)
    if ran is None:
        return Escalation(False, None, None, f"ran out of memory on unknown tier {ran_on_tier}")
    stronger = sorted(
        (t for t in tier_list if t.auto_assign and t.sort_order > ran.sort_order),
        key=lambda t: (t.sort_order, t.name),
    )
    if not stronger:
        return Escalation(
            False,
            None,
            None,
            f"out of memory on {ran.name}, and no stronger auto-assign tier exists",
        )
    nxt = stronger[0]
    plist = list(placements)
    fit_any = any(
        (t := by_name.get(p.tier)) is not None and fits(num_gpus, nxt.sort_order, t, p.capacity)
        for p in plist
    )
    if not fit_any:
        return Escalation(
            False,
            None,
            nxt.name,
            f"out of memory on {ran.name}; no placement at tier >= {nxt.name} "
            f"can hold num_gpus={num_gpus}",
        )
    return Escalation(
        True, nxt.sort_order, nxt.name, f"out of memory on {ran.name}; retrying at >= {nxt.name}"
    )
