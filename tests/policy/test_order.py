"""The placement orders (SPEC §1): the index answers what sorting by the keys answers.

`IdleIndex` is the fast form that decide and the peers query; `dispatch_key` /
`reserve_key` say what the order is (and the API lists placements with them). Here random
inventories and random changes of idle counts check that both always agree, for both
dispatch orders.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jpushare.policy.fit import fit_placements, fits
from jpushare.policy.model import Placement, Tier
from jpushare.policy.order import (
    IdleIndex,
    PlacementOrder,
    dispatch_key,
    parse_placement_order,
    reserve_key,
)

Key = tuple[str, str]


@st.composite
def inventories(draw: st.DrawFn) -> tuple[dict[str, Tier], list[Placement]]:
    tiers = {
        f"t{k}": Tier(
            f"t{k}",
            10.0,
            sort_order=draw(st.integers(1, 3)) * 10,
            max_gpus=draw(st.sampled_from([2, 4, 8, 8])),
            auto_assign=draw(st.sampled_from([True, True, True, False])),
        )
        for k in range(draw(st.integers(1, 3)))
    }
    placements = []
    for n in range(draw(st.integers(1, 8))):
        for tier in draw(
            st.lists(st.sampled_from(sorted(tiers)), min_size=1, max_size=2, unique=True)
        ):
            capacity = draw(st.sampled_from([1, 2, 4, 8, 10]))
            placements.append(
                Placement(
                    f"node{n}",
                    tier,
                    capacity,
                    busy=draw(st.integers(0, capacity)),
                    schedulable=draw(st.sampled_from([True, True, True, False])),
                )
            )
    return tiers, placements


def expected(
    tiers: dict[str, Tier], placements: list[Placement], idle: dict[Key, int], n: int, m: int
) -> tuple[dict[PlacementOrder, Key | None], Key | None, int, tuple[int, int]]:
    fit = [p for p in placements if fits(n, m, tiers[p.tier], p.capacity)]
    dispatch: dict[PlacementOrder, Key | None] = {}
    for order in PlacementOrder:
        holders = [p for p in fit if idle[p.key] >= n]
        best = min(
            holders,
            key=lambda p: dispatch_key(
                order, n, tiers[p.tier].sort_order, idle[p.key], p.node, p.tier
            ),
            default=None,
        )
        dispatch[order] = None if best is None else best.key
    some = [p for p in fit if idle[p.key] > 0]
    reserve = min(
        some,
        key=lambda p: reserve_key(tiers[p.tier].sort_order, idle[p.key], p.node, p.tier),
        default=None,
    )
    most = max((idle[p.key] for p in fit), default=0)
    counts = (len(fit), sum(p.schedulable for p in fit))
    return dispatch, None if reserve is None else reserve.key, most, counts


@settings(
    max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(inventories(), st.data())
def test_the_index_answers_what_sorting_by_the_order_keys_answers(
    inventory: tuple[dict[str, Tier], list[Placement]], data: st.DataObject
) -> None:
    tiers, placements = inventory
    index = IdleIndex(tiers, placements)
    idle = {p.key: p.free for p in placements}
    assert index.idle == idle
    keys = [p.key for p in placements]
    for _ in range(data.draw(st.integers(1, 8))):
        for n in (1, 2, 3, 4, 8):
            for m in (0, 20, 30):
                dispatch, reserve, most, counts = expected(tiers, placements, idle, n, m)
                for order in PlacementOrder:
                    assert index.first_to_dispatch(order, n, m) == dispatch[order]
                assert index.first_to_reserve(n, m) == reserve
                assert index.best_idle(n, m) == most
                assert index.fit_counts(n, m) == counts
        # Change one idle count (as a dispatch, a reservation or a release does).
        key = data.draw(st.sampled_from(keys))
        value = data.draw(st.integers(0, 10))
        generation = index.generation
        index.set(key, value)
        assert index.generation == generation + (idle[key] != value)
        idle[key] = value


def test_the_api_listing_puts_the_placement_a_job_would_start_on_first() -> None:
    # Idle after reservations: node-a 3 (4 free, 1 reserved), node-b 2, node-c 1, node-d 6
    # on a weaker tier. A 2-GPU job: pack lists b (2), a (3), then c (1 idle: cannot hold
    # it), then the weaker tier; spread lists a, b, c, d.
    tiers = {"weak": Tier("weak", 10.0, 10), "strong": Tier("strong", 20.0, 20)}
    placements = [
        Placement("node-a", "strong", 4),
        Placement("node-b", "strong", 4, busy=2),
        Placement("node-c", "strong", 4, busy=3),
        Placement("node-d", "weak", 8, busy=2),
    ]
    reserved = {("node-a", "strong"): 1}

    def listed(order: PlacementOrder) -> list[str]:
        found = fit_placements(2, 10, tiers, placements, reserved=reserved, order=order)
        return [p.node for p in found]

    assert listed(PlacementOrder.PACK) == ["node-b", "node-a", "node-c", "node-d"]
    assert listed(PlacementOrder.SPREAD) == ["node-a", "node-b", "node-c", "node-d"]


@pytest.mark.parametrize(
    ("text", "order"),
    [
        ("pack", PlacementOrder.PACK),
        ("spread", PlacementOrder.SPREAD),
        (" Spread ", PlacementOrder.SPREAD),
    ],
)
def test_placement_orders_parse_by_name(text: str, order: PlacementOrder) -> None:
    assert parse_placement_order(text) is order


def test_an_unknown_placement_order_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"placement must be one of pack, spread, not 'best'"):
        parse_placement_order("best")
