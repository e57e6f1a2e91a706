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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from enum import StrEnum

from jpushare.policy.model import Placement, Tier
from jpushare.policy.options import parse_choice

Key = tuple[str, str]  # (node, tier)


class PlacementOrder(StrEnum):
    """The dispatch order inside a tier: an operator's option (`JPUSHARE_PLACEMENT`,
    `jpushare simulate --placement`)."""

    PACK = "pack"  # best fit: small jobs fill partly used nodes, whole nodes stay whole
    SPREAD = "spread"  # most idle first: spreads jobs over nodes


PLACEMENT_ORDERS: tuple[str, ...] = tuple(o.value for o in PlacementOrder)


def parse_placement_order(text: str) -> PlacementOrder:
    """`pack` / `spread` -> PlacementOrder; ValueError naming the valid choices."""
    return parse_choice(PlacementOrder, "placement", text)


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


class _Layout:
    """What stays put while only idle counts change: the shelves (one per tier and
    capacity) with their placement counts, the shelf of each placement, the tier groups."""

    __slots__ = (
        "_fit",
        "capacity",
        "groups",
        "schedulable",
        "shelf_of",
        "shelves",
        "tiers",
        "total",
    )

    def __init__(self, tiers: Mapping[str, Tier], placements: Iterable[Placement]) -> None:
        self.tiers = tiers
        self.shelf_of: dict[Key, int] = {}
        self.capacity: list[int] = []
        self.total: list[int] = []  # placements on the shelf, down ones included
        self.schedulable: list[int] = []
        ids: dict[tuple[str, int], int] = {}
        for p in placements:
            if p.tier not in tiers:
                continue
            shelf = ids.get((p.tier, p.capacity))
            if shelf is None:
                shelf = ids[(p.tier, p.capacity)] = len(self.capacity)
                self.capacity.append(p.capacity)
                self.total.append(0)
                self.schedulable.append(0)
            self.shelf_of[(p.node, p.tier)] = shelf
            self.total[shelf] += 1
            self.schedulable[shelf] += p.schedulable
        # tier -> its shelves, largest capacity first
        self.shelves: dict[str, list[int]] = {}
        for (tier, _), shelf in sorted(ids.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
            self.shelves.setdefault(tier, []).append(shelf)
        # sort_order groups of the auto-assign tiers, strongest first: [(sort_order, names)]
        groups: dict[int, list[str]] = {}
        for t in tiers.values():
            if t.auto_assign and t.name in self.shelves:
                groups.setdefault(t.sort_order, []).append(t.name)
        self.groups = sorted(((o, sorted(ns)) for o, ns in groups.items()), reverse=True)
        self._fit: dict[tuple[int, int], tuple[tuple[int, str, int], ...]] = {}

    def fit_shelves(self, num_gpus: int, min_sort_order: int) -> tuple[tuple[int, str, int], ...]:
        """(sort_order, tier, shelf) of every shelf that fits a job class, strongest first
        (computed once per class: the layout outlives many cycles)."""
        found = self._fit.get((num_gpus, min_sort_order))
        if found is None:
            found = self._fit[(num_gpus, min_sort_order)] = tuple(
                self._fit_shelves(num_gpus, min_sort_order)
            )
        return found

    def _fit_shelves(self, num_gpus: int, min_sort_order: int) -> Iterator[tuple[int, str, int]]:
        tiers = self.tiers
        for sort_order, names in self.groups:
            if sort_order < min_sort_order:
                return
            for name in names:
                if tiers[name].max_gpus < num_gpus:
                    continue
                for shelf in self.shelves[name]:
                    if self.capacity[shelf] < num_gpus:
                        break
                    yield sort_order, name, shelf


class IdleIndex:
    """Idle GPUs per placement, and the first placement of an order that holds a job.

    Per tier and capacity a "shelf": a sorted list of (idle, node) of its placements with
    idle > 0. A change of one idle count is a bisect and a list insert (a memmove); a query
    bisects the shelves of the fit tiers, strongest first. `generation` counts changes, so
    callers can cache what a class of jobs found. `copy()` is cheap (the layout is shared),
    which lets a shell keep one index up to date and hand a copy to each cycle
    (`IndexedPlacements`).
    """

    __slots__ = ("entries", "generation", "idle", "layout", "placements", "version")

    def __init__(self, tiers: Mapping[str, Tier], placements: Iterable[Placement]) -> None:
        plist = list(placements)
        self.layout = _Layout(tiers, plist)
        self.generation = 0
        self.version = 0  # counts `replace_placement` calls
        self.placements: dict[Key, Placement] = {}
        self.idle: dict[Key, int] = {}
        self.entries: list[list[tuple[int, str]]] = [[] for _ in self.layout.capacity]
        shelf_of = self.layout.shelf_of
        for p in plist:
            key = (p.node, p.tier)
            shelf = shelf_of.get(key)
            if shelf is None:
                continue
            self.placements[key] = p
            free = p.capacity - p.busy if p.schedulable else 0
            if free > 0:
                self.idle[key] = free
                self.entries[shelf].append((free, p.node))
            else:
                self.idle[key] = 0
        for e in self.entries:
            e.sort()

    @property
    def tiers(self) -> Mapping[str, Tier]:
        return self.layout.tiers

    def copy(self) -> IdleIndex:
        """An independent index in the same state (generation restarts at 0)."""
        other = IdleIndex.__new__(IdleIndex)
        other.layout = self.layout
        other.generation = 0
        other.version = 0
        other.placements = self.placements.copy()
        other.idle = self.idle.copy()
        other.entries = [e.copy() for e in self.entries]
        return other

    def replace_placement(self, p: Placement) -> None:
        """Take a new state of one placement (busy GPUs, up or down) into the index."""
        key = (p.node, p.tier)
        self.version += 1
        old = self.placements.get(key)
        if old is None or old.capacity != p.capacity or old.schedulable != p.schedulable:
            placements = dict(self.placements)
            placements[key] = p
            rebuilt = IdleIndex(self.layout.tiers, placements.values())
            self.layout, self.placements = rebuilt.layout, rebuilt.placements
            self.idle, self.entries = rebuilt.idle, rebuilt.entries
            self.generation += 1
            return
        self.placements[key] = p
        self.set(key, p.capacity - p.busy if p.schedulable else 0)

    # -- changes ------------------------------------------------------------------------

    def set(self, key: Key, value: int) -> None:
        old = self.idle[key]
        if old == value:
            return
        self.idle[key] = value
        self.generation += 1
        entries = self.entries[self.layout.shelf_of[key]]
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
        entries = self.entries
        best: tuple[int, str, str] | None = None  # (idle, or -idle for spread; node; tier)
        group: int | None = None
        for sort_order, name, shelf in self.layout.fit_shelves(n, min_sort_order):
            if sort_order != group:
                if best is not None:
                    break  # a stronger tier holds the job
                group = sort_order
            e = entries[shelf]
            if not e:
                continue
            if pack:
                i = bisect_left(e, (n, ""))
                if i == len(e):
                    continue
                cand = (e[i][0], e[i][1], name)
            else:
                top = e[-1][0]
                if top < n:
                    continue
                cand = (-top, e[bisect_left(e, (top, ""))][1], name)
            if best is None or cand < best:
                best = cand
        return None if best is None else (best[1], best[2])

    def first_to_reserve(self, num_gpus: int, min_sort_order: int) -> Key | None:
        """The first fit placement in reserve order with an idle GPU (SPEC §3 (c))."""
        best = self._most(num_gpus, min_sort_order, first_group_only=True)
        return None if best is None else (best[1], best[2])

    def shelf_most(self, key: Key) -> int:
        """The most idle GPUs on one placement of `key`'s shelf (its tier and capacity):
        what `best_idle` reads of that shelf."""
        e = self.entries[self.layout.shelf_of[key]]
        return e[-1][0] if e else 0

    def best_idle(self, num_gpus: int, min_sort_order: int) -> int:
        """The most idle GPUs on any one fit placement (0: none)."""
        best = self._most(num_gpus, min_sort_order, first_group_only=False)
        return 0 if best is None else -best[0]

    def _most(
        self, n: int, min_sort_order: int, *, first_group_only: bool
    ) -> tuple[int, str, str] | None:
        entries = self.entries
        best: tuple[int, str, str] | None = None  # (-idle, node, tier)
        group: int | None = None
        for sort_order, name, shelf in self.layout.fit_shelves(n, min_sort_order):
            if sort_order != group:
                if best is not None and first_group_only:
                    break
                group = sort_order
            e = entries[shelf]
            if not e:
                continue
            top = e[-1][0]
            cand = (-top, e[bisect_left(e, (top, ""))][1], name)
            if best is None or cand < best:
                best = cand
        return best

    def fit_counts(self, num_gpus: int, min_sort_order: int) -> tuple[int, int]:
        """(fit placements, schedulable ones) for a job class: static, from the inventory."""
        layout = self.layout
        fit = schedulable = 0
        for _, _, shelf in layout.fit_shelves(num_gpus, min_sort_order):
            fit += layout.total[shelf]
            schedulable += layout.schedulable[shelf]
        return fit, schedulable


class IndexedPlacements(tuple[Placement, ...]):
    """A snapshot's placements with the `IdleIndex` (for `tiers`) they were taken from, as
    it was then (`version`).

    Equal to the plain tuple, and the policies decide the same on either (tests check it
    on every cycle of random replays); the simulator keeps one index up to date as
    placements change, so that a cycle copies it instead of rebuilding it, as long as
    nothing has changed since the snapshot was taken.
    """

    source: IdleIndex
    version: int
    tiers: tuple[Tier, ...]

    def __new__(
        cls, placements: Iterable[Placement], source: IdleIndex, tiers: tuple[Tier, ...]
    ) -> IndexedPlacements:
        self = super().__new__(cls, placements)
        self.source = source
        self.version = source.version
        self.tiers = tiers
        return self

    def __reduce__(self) -> tuple[type[tuple[Placement, ...]], tuple[tuple[Placement, ...]]]:
        # Pickled (or deep-copied) as the plain tuple it equals; the index is a cache.
        return (tuple, (tuple(self),))


def idle_index_of(tiers: tuple[Tier, ...], placements: Sequence[Placement]) -> IdleIndex:
    """A fresh index of a snapshot's placements: a copy of the one they were taken from,
    if it has not changed since."""
    if (
        isinstance(placements, IndexedPlacements)
        and placements.source.version == placements.version
        and (placements.tiers is tiers or placements.tiers == tiers)
    ):
        return placements.source.copy()
    return IdleIndex({t.name: t for t in tiers}, placements)
