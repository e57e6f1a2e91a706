"""The cycle runs the policy it is given (`CycleDeps.policy`, `JPUSHARE_POLICY`): the same
queue under a peer policy and under SPEC §3's reservation policy."""

from __future__ import annotations

from dataclasses import replace

from jpushare.dispatcher.cycle import run_cycle
from jpushare.policy.peers import fifo
from tests.cycle_rig import MemoryRig


def test_a_cycle_decides_by_its_policy_fifo_blocks_where_reservation_reserves(
    rig: MemoryRig,
) -> None:
    _small, hold = rig.start_held("alice", 1, "small")
    big = rig.submit("bob", 2, "true")  # node-a has 1 idle GPU: it cannot start
    after = rig.submit("bob", 1, "true")  # would fit node-b

    # fifo: the blocked head job reserves nothing and nobody passes it.
    report = run_cycle(replace(rig.deps, policy=fifo))
    assert report.reservations_started == 0 and report.dispatched.started == ()
    assert rig.job(big).reserved_gpus == 0
    assert rig.job(after).state == "GLOBAL_QUEUE_WAIT"

    # The default, SPEC §3: the head job reserves node-a's idle GPU, the next one starts.
    report = rig.cycle()
    assert report.reservations_started == 1 and report.dispatched.started == (after,)
    assert (rig.job(big).reserved_gpus, rig.job(big).reserved_node_name) == (1, "node-a")
    hold.release()
