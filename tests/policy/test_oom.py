"""OOM escalation (SPEC §5, S10): retry on the next stronger auto-assign tier, or fail."""

from __future__ import annotations

from jpushare.policy.model import Placement, Tier
from jpushare.policy.oom import Escalation, escalate
from tests.constants import RTX3080TI, RTX4090, RTX5090

A100 = Tier("a100", tflops=312.0, sort_order=15, auto_assign=False)
TIERS = (RTX3080TI, A100, RTX4090, RTX5090)

PLACEMENTS = (
    Placement("node-a", "rtx3080ti", 4),
    Placement("node-z", "a100", 8),
    Placement("node-b", "rtx4090", 4),
    Placement("node-c", "rtx5090", 4),
)


def test_an_oom_job_requeues_with_the_next_auto_assign_tier_as_its_minimum() -> None:
    assert escalate(2, "rtx3080ti", TIERS, PLACEMENTS) == Escalation(
        requeue=True,
        min_sort_order=20,
        next_tier="rtx4090",
        reason="out of memory on rtx3080ti; retrying at >= rtx4090",
    )


def test_escalation_skips_tiers_that_are_not_auto_assign() -> None:
    # a100 (15) sits between 3080 Ti (10) and 4090 (20) but the dispatcher never uses it.
    esc = escalate(4, "rtx3080ti", TIERS, PLACEMENTS)
    assert esc.requeue
    assert esc.next_tier == "rtx4090"
    assert esc.min_sort_order == 20


def test_escalation_from_a_hand_placed_tier_goes_to_the_next_auto_assign_one() -> None:
    esc = escalate(2, "a100", TIERS, PLACEMENTS)
    assert (esc.requeue, esc.min_sort_order, esc.next_tier) == (True, 20, "rtx4090")


def test_a_tier_with_the_same_sort_order_is_not_stronger() -> None:
    twin = Tier("rtx4090d", tflops=73.5, sort_order=20)
    placements = (*PLACEMENTS, Placement("node-d", "rtx4090d", 4))
    esc = escalate(2, "rtx4090", (*TIERS, twin), placements)
    assert (esc.min_sort_order, esc.next_tier) == (30, "rtx5090")


def test_an_oom_on_the_strongest_tier_fails_the_job() -> None:
    assert escalate(2, "rtx5090", TIERS, PLACEMENTS) == Escalation(
        requeue=False,
        min_sort_order=None,
        next_tier=None,
        reason="out of memory on rtx5090, and no stronger auto-assign tier exists",
    )


def test_the_job_fails_when_no_placement_at_the_new_minimum_can_hold_it() -> None:
    placements = (
        Placement("node-a", "rtx3080ti", 8),
        Placement("node-b", "rtx4090", 4),
        Placement("node-c", "rtx5090", 4),
        Placement("node-z", "a100", 8),  # big enough, but not auto-assign
    )
    assert escalate(8, "rtx3080ti", TIERS, placements) == Escalation(
        requeue=False,
        min_sort_order=None,
        next_tier="rtx4090",
        reason="out of memory on rtx3080ti; no placement at tier >= rtx4090 can hold num_gpus=8",
    )


def test_the_job_requeues_when_only_a_tier_above_the_next_one_can_hold_it() -> None:
    # The 4090s are 2 per node, but the 5090s (also >= rtx4090) hold 4.
    placements = (
        Placement("node-a", "rtx3080ti", 4),
        Placement("node-b", "rtx4090", 2),
        Placement("node-c", "rtx5090", 4),
    )
    esc = escalate(4, "rtx3080ti", TIERS, placements)
    assert (esc.requeue, esc.min_sort_order, esc.next_tier) == (True, 20, "rtx4090")


def test_max_gpus_of_the_stronger_tiers_counts_for_the_fit() -> None:
    capped_4090 = Tier("rtx4090", 82.6, 20, max_gpus=2)
    capped_5090 = Tier("rtx5090", 104.8, 30, max_gpus=2)
    esc = escalate(4, "rtx3080ti", (RTX3080TI, capped_4090, capped_5090), PLACEMENTS)
    assert not esc.requeue
    assert esc.reason.endswith("can hold num_gpus=4")


def test_a_node_that_is_down_still_counts_for_the_fit() -> None:
    placements = (Placement("node-a", "rtx3080ti", 2), Placement("node-b", "rtx4090", 2, 0, False))
    assert escalate(2, "rtx3080ti", TIERS, placements).requeue


def test_an_oom_on_an_unknown_tier_fails_the_job() -> None:
    esc = escalate(2, "h100", TIERS, PLACEMENTS)
    assert not esc.requeue
    assert "unknown tier h100" in esc.reason
