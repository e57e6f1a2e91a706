"""Static fit (SPEC §1) and the submission check NO_FIT_PLACEMENT (SPEC §2)."""

from __future__ import annotations

import pytest

from jpushare.policy.fit import (
    MAX_GPUS,
    Alternative,
    FitReport,
    check_fit,
    default_min_sort_order,
    fit_placements,
    fits,
)
from jpushare.policy.model import Placement, Tier
from tests.constants import RTX3080TI, RTX4090, RTX5090

A100 = Tier("a100", tflops=312.0, sort_order=15, auto_assign=False)  # admins place it by hand


@pytest.mark.parametrize(
    ("num_gpus", "min_sort_order", "tier", "capacity", "expected"),
    [
        (2, 10, RTX4090, 2, True),  # exactly the capacity
        (3, 10, RTX4090, 2, False),  # more than the placement holds
        (2, 20, RTX4090, 2, True),  # minimum equal to the tier
        (2, 21, RTX4090, 2, False),  # minimum above the tier
        (2, 10, A100, 8, False),  # not auto-assign: the dispatcher never places jobs there
        (4, 10, Tier("small", 1.0, 10, max_gpus=2), 8, False),  # above the tier's max_gpus
        (2, 10, Tier("small", 1.0, 10, max_gpus=2), 8, True),
    ],
)
def test_fit_needs_auto_assign_the_minimum_tier_the_capacity_and_max_gpus(
    num_gpus: int, min_sort_order: int, tier: Tier, capacity: int, expected: bool
) -> None:
    assert fits(num_gpus, min_sort_order, tier, capacity) is expected


def test_fit_placements_are_ordered_stronger_tier_first_then_node_name_and_ignore_busy() -> None:
    tiers = {t.name: t for t in (RTX3080TI, A100, RTX4090, RTX5090)}
    placements = [
        Placement("node-b", "rtx4090", 2, busy=2),
        Placement("node-a", "rtx3080ti", 4),
        Placement("node-c", "rtx5090", 2, schedulable=False),
        Placement("node-a", "rtx4090", 2),
        Placement("node-z", "a100", 8),
        Placement("node-q", "unknown", 8),  # a tier not in the table never fits
    ]

    keys = [p.key for p in fit_placements(2, 10, tiers, placements)]

    assert keys == [
        ("node-c", "rtx5090"),
        ("node-a", "rtx4090"),
        ("node-b", "rtx4090"),
        ("node-a", "rtx3080ti"),
    ]


def test_the_default_minimum_is_the_lowest_auto_assign_tier() -> None:
    assert default_min_sort_order([RTX5090, A100, RTX4090]) == 20
    with pytest.raises(ValueError, match="no auto-assign tier"):
        default_min_sort_order([A100])


def test_a_job_that_fits_is_accepted_with_the_number_of_placements_and_the_largest_fit() -> None:
    tiers = (RTX3080TI, RTX4090)
    placements = (
        Placement("node-a", "rtx4090", 4, busy=4, schedulable=False),  # static: still counts
        Placement("node-b", "rtx4090", 2),
        Placement("node-c", "rtx3080ti", 8),
    )

    assert check_fit(2, 20, tiers, placements) == FitReport(
        ok=True,
        num_gpus=2,
        min_tier="rtx4090",
        fit_count=2,
        largest_fit=4,
        alternatives=(),
        message="2 placements fit",
    )


def test_max_gpus_caps_the_largest_fit_below_the_capacity() -> None:
    capped = Tier("rtx4090", 82.6, 20, max_gpus=4)
    placements = (Placement("node-a", "rtx4090", 8), Placement("node-b", "rtx4090", 8))

    report = check_fit(8, 20, (capped,), placements)

    assert report == FitReport(
        ok=False,
        num_gpus=8,
        min_tier="rtx4090",
        fit_count=0,
        largest_fit=4,
        alternatives=(Alternative(num_gpus=4, min_tier="rtx4090", placements=2),),
        message="no placement can hold num_gpus=8 at tier >= rtx4090; the largest fit is 4",
    )


def test_the_largest_fit_never_exceeds_the_submission_limit_of_8() -> None:
    big = Tier("rtx4090", 82.6, 20, max_gpus=16)
    report = check_fit(2, 20, (big,), (Placement("node-a", "rtx4090", 10),))
    assert report.ok
    assert report.largest_fit == MAX_GPUS


def test_gpus_of_a_tier_that_is_not_auto_assign_never_make_a_job_fit() -> None:
    placements = (Placement("node-z", "a100", 8), Placement("node-a", "rtx3080ti", 2))

    report = check_fit(4, 10, (RTX3080TI, A100), placements)

    assert not report.ok
    assert report.fit_count == 0
    assert report.largest_fit == 2  # the 8 A100s are not offered
    assert report.alternatives == (Alternative(2, "rtx3080ti", 1),)
    assert report.message == (
        "no placement can hold num_gpus=4 at tier >= rtx3080ti; the largest fit is 2"
    )


def test_a_smaller_job_and_a_weaker_minimum_tier_are_both_offered_as_alternatives() -> None:
    tiers = (RTX3080TI, RTX4090)
    placements = (Placement("node-a", "rtx4090", 2), Placement("node-c", "rtx3080ti", 4))

    report = check_fit(4, 20, tiers, placements)

    assert report == FitReport(
        ok=False,
        num_gpus=4,
        min_tier="rtx4090",
        fit_count=0,
        largest_fit=2,
        alternatives=(
            Alternative(num_gpus=2, min_tier="rtx4090", placements=1),
            Alternative(num_gpus=4, min_tier="rtx3080ti", placements=1),
        ),
        message=(
            "no placement can hold num_gpus=4 at tier >= rtx4090; the largest fit is 2; "
            "num_gpus=4 fits at tier >= rtx3080ti"
        ),
    )


def test_the_weaker_tier_offered_is_the_strongest_auto_assign_one_that_holds_the_job() -> None:
    tiers = (RTX3080TI, A100, RTX4090, RTX5090)
    placements = (
        Placement("node-a", "rtx3080ti", 4),
        Placement("node-z", "a100", 4),  # not auto-assign: never offered
        Placement("node-b", "rtx4090", 4),
        Placement("node-c", "rtx5090", 2),
    )

    report = check_fit(4, 30, tiers, placements)

    assert report.alternatives == (
        Alternative(num_gpus=2, min_tier="rtx5090", placements=1),
        Alternative(num_gpus=4, min_tier="rtx4090", placements=1),
    )


def test_a_minimum_above_every_tier_is_rejected_and_a_weaker_tier_is_offered() -> None:
    tiers = (RTX3080TI, RTX4090)
    placements = (Placement("node-a", "rtx4090", 2), Placement("node-c", "rtx3080ti", 4))

    report = check_fit(2, 99, tiers, placements)

    assert report == FitReport(
        ok=False,
        num_gpus=2,
        min_tier=None,
        fit_count=0,
        largest_fit=0,
        alternatives=(Alternative(num_gpus=2, min_tier="rtx4090", placements=1),),
        message=(
            "no placement can hold num_gpus=2: no auto-assign tier is as strong as the minimum "
            "asked for; num_gpus=2 fits at tier >= rtx4090"
        ),
    )


def test_a_configured_tier_without_gpus_says_no_such_gpu_is_in_the_inventory() -> None:
    tiers = (RTX3080TI, RTX4090, RTX5090)
    placements = (Placement("node-a", "rtx4090", 2),)

    report = check_fit(2, 30, tiers, placements)

    assert not report.ok
    assert report.min_tier == "rtx5090"
    assert report.largest_fit == 0
    assert report.alternatives == (Alternative(2, "rtx4090", 1),)
    assert report.message == (
        "no placement can hold num_gpus=2 at tier >= rtx5090; no auto-assign GPU of that "
        "tier or a stronger one is in the inventory; num_gpus=2 fits at tier >= rtx4090"
    )


def test_an_empty_inventory_fits_nothing_and_offers_nothing() -> None:
    report = check_fit(1, 10, (RTX3080TI,), ())
    assert not report.ok
    assert report.alternatives == ()
    assert report.largest_fit == 0
