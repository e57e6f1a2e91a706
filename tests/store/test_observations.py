"""The busy GPUs the API sees: the dispatcher's last observation plus what it dispatched
after it, so "why" and the placements never offer GPUs a just-dispatched job holds."""

from __future__ import annotations

from jpushare.store.observations import load_observed_busy, save_observed_busy
from tests.store.conftest import ALL_BUSY, World, at, run_cycle, submit


def test_a_job_dispatched_after_the_observation_counts_as_busy_and_only_once(
    world: World,
) -> None:
    # Everything busy but node-b's four 4090s, as observed at the start of the cycle.
    observed = {**ALL_BUSY, ("node-b", "rtx4090"): 0}
    with world.sessions.begin() as s:
        save_observed_busy(s, observed, at(10))
    job = submit(world, world.alice, 2, seconds=1, min_tier="rtx4090")
    _, recorded = run_cycle(world, 10, observed)  # the same cycle dispatches it, after observing
    assert [d.job_id for d in recorded.dispatched] == [job]

    with world.sessions() as s:
        busy = load_observed_busy(s)
    assert busy[("node-b", "rtx4090")] == 2  # promised to the job, not in the observation
    assert {k: v for k, v in busy.items() if k != ("node-b", "rtx4090")} == {
        k: v for k, v in ALL_BUSY.items() if k != ("node-b", "rtx4090") and v > 0
    }

    # The next cycle's observation sees the job (pending or running): not counted twice.
    with world.sessions.begin() as s:
        save_observed_busy(s, {**observed, ("node-b", "rtx4090"): 2}, at(15))
    with world.sessions() as s:
        assert load_observed_busy(s)[("node-b", "rtx4090")] == 2


def test_before_any_observation_every_active_job_is_busy(world: World) -> None:
    job = submit(world, world.bob, 4, seconds=1, min_tier="rtx5090")
    _, recorded = run_cycle(world, 5, {})
    assert [d.job_id for d in recorded.dispatched] == [job]
    with world.sessions() as s:
        assert load_observed_busy(s) == {("node-c", "rtx5090"): 4}
