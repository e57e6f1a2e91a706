"""The placement orders of SPEC §1, written once: where to dispatch and where to reserve.

No I/O. Every policy (decide and its peers) and the API's listing take their order from
here: the sort keys say what the order is, `IdleIndex` answers "the first placement in
that order" in O(tiers x log placements) per query and per change of an idle count.

Fit placements are ordered strongest tier first (`sort_order` DESC), then

- dispatch (SPEC §3 (a)), `PlacementOrder.PACK` (the default, best fit): the fewest idle
  GPUs that still hold the job, then node name; `PlacementOrder.SPREAD`: the most idle
  GPUs first, then node name (the spec's order before its decision 6);
- reserve (SPEC §3 (c)): the most idle GPUs first, then node name, whatever the option.

Tiers of equal `sort_order` tie on the tier name last.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping
from enum import StrEnum

from jpushare.policy.model import Placement, Tier

Key = tuple[str, str]  # (node, tier)


class PlacementOrder(StrEnum):
    """The dispatch order inside a tier: an operator's option (`JPUSHARE_PLACEMENT`,
    `jpushare simulate --placement`)."""

    PACK = "pack"  # best fit: small jobs fill partly used nodes, whole nodes stay whole
    SPREAD = "spread"  # most idle first: spreads jobs over nodes


PLACEMENT_ORDERS: tuple[str, ...] = tuple(o.value for o in PlacementOrder)


def parse_placement_order(text: str) -> PlacementOrder:
    """`pack` / `spread` -> PlacementOrder; ValueError naming the valid choices."""
    try:
        return PlacementOrder(text.strip().lower())
    except ValueError:
        raise ValueError(
            f"placement must be one of {', '.join(PLACEMENT_ORDERS)}, not {text!r}"
        ) from None


def dispatch_key(
    order: PlacementOrder, num_gpus: int, sort_order: int, idle: int, node: str, tier: str
) -> tuple[int, int, int, str, str]:
    """Sort key of the dispatch order (SPEC §1, §3 (a)) for a job of `num_gpus` GPUs.

    A total order, so the API can list every fit placement with it: inside a tier the
    placements that hold the job now come first, in the dispatch order; those that do
    not follow, closest to holding it first. Dispatch takes the first that holds the job.
    """
    if order is PlacementOrder.SPREAD:
        return (-sort_order, 0, -idle, node, tier)
    if idle >= num_gpus:
        return (-sort_order, 0, idle, node, tier)
    return (-sort_order, 1, -idle, node, tier)


def reserve_key(sort_order: int, idle: int, node: str, tier: str) -> tuple[int, int, str, str]:
    """Sort key of the order in which to reserve (SPEC §1, §3 (c)): tier DESC, idle DESC,
    node name. `backfill` plans its pivot job with it too (its reservation in time)."""
    return (-sort_order, -idle, node, tier)


class _Shelf:
    """The placements of one tier and one capacity with idle GPUs: (idle, node) sorted."""

    __slots__ = ("capacity", "entries", "schedulable", "total")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.entries: list[tuple[int, str]] = []
        self.total = 0  # placements of this tier and capacity, down ones included
        self.schedulable = 0

    def fewest_holding(self, n: int) -> tuple[int, str] | None:
        """(idle, node) with the fewest idle GPUs >= n, smallest node among equals."""
        e = self.entries
        i = bisect_left(e, (n, ""))
        return e[i] if i < len(e) else None

    def most(self) -> tuple[int, str] | None:
        """(idle, node) with the most idle GPUs, smallest node among equals."""
        e = self.entries
        if not e:
            return None
        return e[bisect_left(e, (e[-1][0], ""))]


class IdleIndex:
    """Idle GPUs per placement, and the first placement of an order that holds a job.

    Per tier, one sorted list of (idle, node) per distinct capacity (usually one or two),
    holding the placements with idle > 0. A change of one idle count is a bisect and a
    list insert (a memmove); a query bisects the lists of the fit tiers, strongest first.
    `generation` counts changes, so callers can cache what a class of jobs found.
    """

    __slots__ = ("generation", "groups", "idle", "placements", "shelf_of", "shelves", "tiers")

    def __init__(
        self,
        tiers: Mapping[str, Tier],
        placements: Iterable[Placement],
    ) -> None:
        self.tiers = tiers
        self.generation = 0
        self.placements: dict[Key, Placement] = {}
        self.idle: dict[Key, int] = {}
        self.shelf_of: dict[Key, _Shelf] = {}
        # tier -> shelves by capacity, largest first
        self.shelves: dict[str, list[_Shelf]] = {}
        by_tc: dict[tuple[str, int], _Shelf] = {}
        for p in placements:
            tier, cap = p.tier, p.capacity
            if tier not in tiers:
                continue
            key = (p.node, tier)
            self.placements[key] = p
            shelf = by_tc.get((tier, cap))
            if shelf is None:
                shelf = by_tc[(tier, cap)] = _Shelf(cap)
            self.shelf_of[key] = shelf
            shelf.total += 1
            if p.schedulable:
                shelf.schedulable += 1
                free = cap - p.busy
                if free > 0:
                    self.idle[key] = free
                    shelf.entries.append((free, p.node))
                    continue
            self.idle[key] = 0
        for (tier, _), shelf in sorted(by_tc.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
            shelf.entries.sort()
            self.shelves.setdefault(tier, []).append(shelf)
        # sort_order groups of the auto-assign tiers, strongest first: [(sort_order, names)]
        groups: dict[int, list[str]] = {}
        for t in tiers.values():
            if t.auto_assign and t.name in self.shelves:
                groups.setdefault(t.sort_order, []).append(t.name)
        self.groups = sorted(((o, sorted(ns)) for o, ns in groups.items()), reverse=True)

    # -- changes ------------------------------------------------------------------------

    def set(self, key: Key, value: int) -> None:
        old = self.idle[key]
        if old == value:
            return
        self.idle[key] = value
        self.generation += 1
        entries = self.shelf_of[key].entries
        node = key[0]
        if old > 0:
            del entries[bisect_left(entries, (old, node))]
        if value > 0:
            insort(entries, (value, node))

    def add(self, key: Key, delta: int) -> None:
        self.set(key, self.idle[key] + delta)

    # -- queries ------------------------------------------------------------------------

    def first_to_dispatch(
        self, order: PlacementOrder, num_gpus: int, min_sort_order: int
    ) -> Key | None:
        """The first fit placement in dispatch order with >= num_gpus idle GPUs (SPEC §3 (a))."""
        pack = order is PlacementOrder.PACK
        n = num_gpus
        for sort_order, names in self.groups:
            if sort_order < min_sort_order:
                break
            best: tuple[int, str, str] | None = None  # (idle, or -idle for spread; node; tier)
            for name in names:
                if self.tiers[name].max_gpus < n:
                    continue
                for shelf in self.shelves[name]:
                    if shelf.capacity < n:
                        break
                    top = shelf.fewest_holding(n) if pack else shelf.most()
                    if top is None or top[0] < n:
                        continue
                    cand = (top[0] if pack else -top[0], top[1], name)
                    if best is None or cand < best:
                        best = cand
            if best is not None:
                return (best[1], best[2])
        return None

    def first_to_reserve(self, num_gpus: int, min_sort_order: int) -> Key | None:
        """The first fit placement in reserve order with an idle GPU (SPEC §3 (c))."""
        best = self._most(num_gpus, min_sort_order, first_group_only=True)
        return None if best is None else (best[1], best[2])

    def best_idle(self, num_gpus: int, min_sort_order: int) -> int:
        """The most idle GPUs on any one fit placement (0: none)."""
        best = self._most(num_gpus, min_sort_order, first_group_only=False)
        return 0 if best is None else -best[0]

    def _most(
        self, n: int, min_sort_order: int, *, first_group_only: bool
    ) -> tuple[int, str, str] | None:
        best: tuple[int, str, str] | None = None  # (-idle, node, tier)
        for sort_order, names in self.groups:
            if sort_order < min_sort_order:
                break
            for name in names:
                if self.tiers[name].max_gpus < n:
                    continue
                for shelf in self.shelves[name]:
                    if shelf.capacity < n:
                        break
                    top = shelf.most()
                    if top is None:
                        continue
                    cand = (-top[0], top[1], name)
                    if best is None or cand < best:
                        best = cand
            if best is not None and first_group_only:
                return best
        return best

    def fit_counts(self, num_gpus: int, min_sort_order: int) -> tuple[int, int]:
        """(fit placements, schedulable ones) for a job class: static, from the inventory."""
        fit = schedulable = 0
        for sort_order, names in self.groups:
            if sort_order < min_sort_order:
                break
            for name in names:
                if self.tiers[name].max_gpus < num_gpus:
                    continue
                for shelf in self.shelves[name]:
                    if shelf.capacity < num_gpus:
                        break
                    fit += shelf.total
                    schedulable += shelf.schedulable
        return fit, schedulable
