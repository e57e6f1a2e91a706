"""`placement_counts` (what `placements`, `why` and /metrics show) reads idle through the
policy's own rule, `Placement.free`, and still splits every GPU exactly once."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jpushare.api.metric_figures import placement_counts
from jpushare.policy.model import Placement


@given(
    capacity=st.integers(1, 8),
    busy=st.integers(0, 12),
    reserved=st.integers(0, 12),
    schedulable=st.booleans(),
)
def test_every_gpu_is_busy_reserved_idle_or_unavailable_once(
    capacity: int, busy: int, reserved: int, schedulable: bool
) -> None:
    p = Placement("n", "t", capacity, busy, schedulable)

    c = placement_counts(p, reserved)

    assert c.busy + c.reserved + c.idle + c.unavailable == capacity
    assert c.busy == min(busy, capacity)  # a foreign job over a reservation: busy, not twice
    assert c.reserved == min(reserved, capacity - c.busy)
    assert c.idle == max(0, p.free - c.reserved)  # the policy's idle, less the reserved
    assert (c.idle == 0) if not schedulable else (c.unavailable == 0)


def test_a_drained_placement_has_its_unreserved_gpus_unavailable_not_idle() -> None:
    c = placement_counts(Placement("n", "t", 4, 1, schedulable=False), 1)

    assert (c.busy, c.reserved, c.idle, c.unavailable) == (1, 1, 0, 2)
