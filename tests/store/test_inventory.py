"""Tiers, nodes, GPUs and the placements the policy sees (SPEC §1)."""

from __future__ import annotations

from jpushare import store
from jpushare.executors.base import GpuGroup, NodeState
from jpushare.policy import Placement, Tier
from tests.store.conftest import T0, TIERS, World, at


def test_a_mixed_node_is_two_placements_with_busy_from_the_observation(world: World) -> None:
    with world.sessions.begin() as s:
        got = store.placements(s, {("node-c", "rtx5090"): 3, ("node-a", "rtx3080ti"): 9})
    assert got == [
        Placement("node-a", "rtx3080ti", 4, busy=9),
        Placement("node-b", "rtx4090", 4),
        Placement("node-c", "rtx4090", 4),
        Placement("node-c", "rtx5090", 4, busy=3),
    ]


def test_tiers_upsert_keeps_their_ids(world: World) -> None:
    with world.sessions.begin() as s:
        before = store.get_tier(s, "rtx4090")
        store.upsert_tier(s, "rtx4090", 83.0, 20, max_gpus=4, partition="new")
        after = store.get_tier(s, "rtx4090")
        assert after.id == before.id
        assert (after.tflops, after.max_gpus, after.partition) == (83.0, 4, "new")
        assert store.policy_tiers(s)[0] == Tier("rtx5090", 104.8, 30, partition="p5090")
        assert [t.name for t in store.list_tiers(s)] == ["rtx5090", "rtx4090", "rtx3080ti"]


def test_sync_replaces_a_nodes_gpus_and_reports_unknown_types(world: World) -> None:
    groups = [
        GpuGroup("node-c", "RTX5090", 2, 1, NodeState.UP),  # shrinks 4 -> 2, case-insensitive
        GpuGroup("node-d", "rtx4090", 8, 0, NodeState.DOWN),  # new node, down
        GpuGroup("node-d", "h100", 8, 0, NodeState.DOWN),  # no such tier
    ]
    with world.sessions.begin() as s:
        report = store.sync_inventory(s, groups, at(10), mark_missing_down=True)
        assert report.nodes == ("node-c", "node-d")
        assert report.unknown_gpu_types == (("node-d", "h100"),)
        assert (report.added, report.removed) == (8, 4 + 2)  # node-c lost its 4090s and 2 5090s
        assert report.marked_down == ("node-a", "node-b")
        got = {p.key: p for p in store.placements(s)}
        busy = store.observed_busy(groups, [t.name for t in TIERS])
    assert busy == {("node-c", "rtx5090"): 1, ("node-d", "rtx4090"): 0}
    assert got == {
        ("node-a", "rtx3080ti"): Placement("node-a", "rtx3080ti", 4, schedulable=False),
        ("node-b", "rtx4090"): Placement("node-b", "rtx4090", 4, schedulable=False),
        ("node-c", "rtx5090"): Placement("node-c", "rtx5090", 2),
        ("node-d", "rtx4090"): Placement("node-d", "rtx4090", 8, schedulable=False),
    }


def test_admin_drain_survives_a_sync_and_undrain_restores(world: World) -> None:
    with world.sessions.begin() as s:
        store.drain_node(s, "node-b", "fan broken", T0)
        store.sync_inventory(s, [GpuGroup("node-b", "rtx4090", 4, 0, NodeState.UP)], at(5))
        [node_b] = [n for n in store.list_nodes(s) if n.name == "node-b"]
        assert (node_b.state, node_b.admin_drained, node_b.drain_reason) == (
            "up",
            True,
            "fan broken",
        )
        assert not node_b.schedulable
        assert node_b.gpus == {"rtx4090": 4}
        assert Placement("node-b", "rtx4090", 4, schedulable=False) in store.placements(s)
        store.undrain_node(s, "node-b", at(6))
        assert Placement("node-b", "rtx4090", 4) in store.placements(s)


def test_observed_node_state_down_and_drain_make_placements_unschedulable(world: World) -> None:
    with world.sessions.begin() as s:
        store.set_node_state(s, "node-a", NodeState.DOWN, T0, reason="not responding")
        store.set_node_state(s, "node-b", NodeState.DRAIN, T0)
        sched = {p.node: p.schedulable for p in store.placements(s)}
    assert sched == {"node-a": False, "node-b": False, "node-c": True}


def test_removed_gpus_leave_the_capacity(world: World) -> None:
    with world.sessions.begin() as s:
        store.set_gpu_schedulable(s, "node-b", "rtx4090", 3, False)
        store.remove_node(s, "node-a")
        got = {p.key: p.capacity for p in store.placements(s)}
        assert [n.name for n in store.list_nodes(s)] == ["node-b", "node-c"]
    assert got == {
        ("node-b", "rtx4090"): 3,
        ("node-c", "rtx4090"): 4,
        ("node-c", "rtx5090"): 4,
    }


def test_set_node_gpus_declares_gpus_by_tier_name(world: World) -> None:
    with world.sessions.begin() as s:
        added, removed = store.set_node_gpus(s, "ws-1", {"rtx3080ti": 2}, T0)
        assert (added, removed) == (2, 0)
        assert Placement("ws-1", "rtx3080ti", 2) in store.placements(s)
