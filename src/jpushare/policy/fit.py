"""Static fit (SPEC §1) and the submission check (SPEC §2, NO_FIT_PLACEMENT).

No I/O. Fit depends only on the inventory, never on what is busy right now.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from jpushare.policy.model import Placement, Tier
from jpushare.policy.order import PlacementOrder, dispatch_key

MIN_GPUS = 1
MAX_GPUS = 8


def fits(num_gpus: int, min_sort_order: int, tier: Tier, capacity: int) -> bool:
    """fit(job, p) of SPEC §1, on the pieces it needs."""
    return (
        tier.auto_assign
        and tier.sort_order >= min_sort_order
        and num_gpus <= capacity
        and num_gpus <= tier.max_gpus
    )


def fit_placements(
    num_gpus: int,
    min_sort_order: int,
    tiers: Mapping[str, Tier],
    placements: Iterable[Placement],
    *,
    reserved: Mapping[tuple[str, str], int] | None = None,
    order: PlacementOrder = PlacementOrder.PACK,
) -> list[Placement]:
    """Every placement that fits, in the dispatch order of SPEC §1 (`order.dispatch_key`)
    on the idle GPUs left beside `reserved` (GPUs held by reservations per placement):
    the placement the job would start on first."""
    held = reserved or {}
    out = [
        p
        for p in placements
        if (t := tiers.get(p.tier)) is not None and fits(num_gpus, min_sort_order, t, p.capacity)
    ]
    out.sort(
        key=lambda p: dispatch_key(
            order,
            num_gpus,
            tiers[p.tier].sort_order,
            max(0, p.free - held.get(p.key, 0)),
            p.node,
            p.tier,
        )
    )
    return out


def default_min_sort_order(tiers: Iterable[Tier]) -> int:
    """The lowest auto-assign tier's sort order (SPEC §2): the default minimum."""
    orders = [t.sort_order for t in tiers if t.auto_assign]
    if not orders:
        raise ValueError("no auto-assign tier is configured")
    return min(orders)


@dataclass(frozen=True, slots=True)
class Alternative:
    """Something the user could ask for instead, and where it would fit."""

    num_gpus: int
    min_tier: str
    placements: int


@dataclass(frozen=True, slots=True)
class FitReport:
    """The answer to "can this job ever run here?" at submission."""

    ok: bool
    num_gpus: int
    min_tier: str | None
    fit_count: int
    largest_fit: int  # the most GPUs one job could ask for at this minimum tier (0: none)
    alternatives: tuple[Alternative, ...]
    message: str


def check_fit(
    num_gpus: int,
    min_sort_order: int,
    tiers: Iterable[Tier],
    placements: Iterable[Placement],
) -> FitReport:
    """SPEC §2: at least one placement must fit, else NO_FIT_PLACEMENT and say what could."""
    tier_map = {t.name: t for t in tiers}
    plist = list(placements)
    by_order = sorted(tier_map.values(), key=lambda t: t.sort_order)
    min_tier = next((t.name for t in by_order if t.sort_order >= min_sort_order), None)
    fit_count = sum(
        1
        for p in plist
        if (t := tier_map.get(p.tier)) is not None and fits(num_gpus, min_sort_order, t, p.capacity)
    )

    def largest(order: int) -> int:
        best = 0
        for p in plist:
            t = tier_map.get(p.tier)
            if t is not None and t.auto_assign and t.sort_order >= order:
                best = max(best, min(p.capacity, t.max_gpus, MAX_GPUS))
        return best

    largest_fit = largest(min_sort_order)
    if fit_count:
        return FitReport(
            True, num_gpus, min_tier, fit_count, largest_fit, (), f"{fit_count} placements fit"
        )

    alternatives: list[Alternative] = []
    if largest_fit:
        n = largest_fit
        count = sum(
            1
            for p in plist
            if (t := tier_map.get(p.tier)) is not None and fits(n, min_sort_order, t, p.capacity)
        )
        alternatives.append(Alternative(n, min_tier or "", count))
    # A weaker minimum tier that could hold num_gpus as asked.
    for t in reversed(by_order):
        if t.sort_order >= min_sort_order or not t.auto_assign:
            continue
        count = sum(
            1
            for p in plist
            if (pt := tier_map.get(p.tier)) is not None
            and fits(num_gpus, t.sort_order, pt, p.capacity)
        )
        if count:
            alternatives.append(Alternative(num_gpus, t.name, count))
            break

    where = f" at tier >= {min_tier}" if min_tier else " at any tier"
    if min_tier is None:
        message = (
            f"no placement can hold num_gpus={num_gpus}: no auto-assign tier is as strong "
            "as the minimum asked for"
        )
    elif largest_fit:
        message = (
            f"no placement can hold num_gpus={num_gpus}{where}; the largest fit is {largest_fit}"
        )
    else:
        message = (
            f"no placement can hold num_gpus={num_gpus}{where}; no auto-assign GPU of that "
            "tier or a stronger one is in the inventory"
        )
    for alt in alternatives:
        if alt.num_gpus == num_gpus:
            message += f"; num_gpus={num_gpus} fits at tier >= {alt.min_tier}"
    return FitReport(False, num_gpus, min_tier, 0, largest_fit, tuple(alternatives), message)
