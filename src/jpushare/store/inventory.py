"""The inventory: tiers, nodes and their GPUs, and the placements the policy sees.

A placement (SPEC §1) has no table: it is `GROUP BY node_name, tier_id` over the schedulable
rows of `gpu_resources`. Capacity comes from the inventory; `busy` comes from what the
executor observes now and is passed in by the caller (the store never asks the executor).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from jpushare.executors.base import GpuGroup
from jpushare.policy.model import Placement, Tier
from jpushare.run_settings import check_cpus_per_gpu, check_mem_per_gpu_mb
from jpushare.store.errors import InvalidRequest, NotFound
from jpushare.store.records import NodeRecord, SyncReport, TierRecord
from jpushare.store.schema import GpuResource, GpuTier, Node
from jpushare.vocabulary import NodeState

PlacementKey = tuple[str, str]  # (node name, tier name), as in the policy

# When one node reports several GPU groups, the worst state wins.
_STATE_RANK = {NodeState.UP: 0, NodeState.DRAIN: 1, NodeState.DOWN: 2}


def _tier_record(t: GpuTier) -> TierRecord:
    return TierRecord(
        t.id,
        t.name,
        t.tflops,
        t.sort_order,
        t.max_gpus,
        t.auto_assign,
        t.partition,
        t.cpus_per_gpu,
        t.mem_per_gpu_mb,
    )


# --- tiers -------------------------------------------------------------------------------


def upsert_tier(
    session: Session,
    name: str,
    tflops: float,
    sort_order: int,
    *,
    max_gpus: int = 8,
    auto_assign: bool = True,
    partition: str | None = None,
    cpus_per_gpu: int | None = None,
    mem_per_gpu_mb: int | None = None,
) -> TierRecord:
    """Create the tier `name`, or update its fields; its id never changes. `cpus_per_gpu`
    and `mem_per_gpu_mb` are its jobs' defaults (None: no limit)."""
    if tflops <= 0:
        raise InvalidRequest(f"tier {name}: tflops must be positive, got {tflops}")
    if not 1 <= max_gpus <= 8:
        raise InvalidRequest(f"tier {name}: max_gpus must be 1-8, got {max_gpus}")
    try:
        if cpus_per_gpu is not None:
            check_cpus_per_gpu(cpus_per_gpu)
        if mem_per_gpu_mb is not None:
            check_mem_per_gpu_mb(mem_per_gpu_mb)
    except ValueError as exc:
        raise InvalidRequest(f"tier {name}: {exc}") from exc
    tier = session.scalars(select(GpuTier).where(GpuTier.name == name)).one_or_none()
    if tier is None:
        tier = GpuTier(name=name)
        session.add(tier)
    tier.tflops = tflops
    tier.sort_order = sort_order
    tier.max_gpus = max_gpus
    tier.auto_assign = auto_assign
    tier.partition = partition
    tier.cpus_per_gpu = cpus_per_gpu
    tier.mem_per_gpu_mb = mem_per_gpu_mb
    session.flush()
    return _tier_record(tier)


def upsert_tiers(
    session: Session,
    tiers: Iterable[Tier],
    resources: Mapping[str, tuple[int | None, int | None]] | None = None,
) -> list[TierRecord]:
    """Upsert every policy Tier (e.g. from a cluster file), with its jobs' default CPUs and
    memory per GPU from `resources` (tier name -> (cpus, MiB); absent: no limit)."""
    res = resources or {}
    return [
        upsert_tier(
            session,
            t.name,
            t.tflops,
            t.sort_order,
            max_gpus=t.max_gpus,
            auto_assign=t.auto_assign,
            partition=t.partition,
            cpus_per_gpu=res.get(t.name, (None, None))[0],
            mem_per_gpu_mb=res.get(t.name, (None, None))[1],
        )
        for t in tiers
    ]


def list_tiers(session: Session) -> list[TierRecord]:
    """Every tier, strongest first."""
    rows = session.scalars(select(GpuTier).order_by(GpuTier.sort_order.desc(), GpuTier.name))
    return [_tier_record(t) for t in rows]


def get_tier(session: Session, name: str) -> TierRecord:
    tier = session.scalars(select(GpuTier).where(GpuTier.name == name)).one_or_none()
    if tier is None:
        raise NotFound("tier", name)
    return _tier_record(tier)


# The columns a policy `Tier` is made of, in the order of its fields: `Tier(*row)`.
POLICY_TIER_COLUMNS = (
    GpuTier.name,
    GpuTier.tflops,
    GpuTier.sort_order,
    GpuTier.max_gpus,
    GpuTier.auto_assign,
    GpuTier.partition,
)


def policy_tiers(session: Session) -> list[Tier]:
    """The tiers as the policy's values."""
    return [
        Tier(t.name, t.tflops, t.sort_order, t.max_gpus, t.auto_assign, t.partition)
        for t in list_tiers(session)
    ]


def tier_names_by_sort_order(session: Session) -> dict[int, str]:
    """sort_order -> tier name (a job's minimum tier is stored as a sort order)."""
    out: dict[int, str] = {}
    rows = session.execute(select(GpuTier.sort_order, GpuTier.name).order_by(GpuTier.name))
    for order, name in rows:
        out.setdefault(order, name)
    return out


def tier_for_gpu_type(gpu_type: str, tier_names: Iterable[str]) -> str | None:
    """The tier an executor's GPU type maps to: the tier of that name (case-insensitive)."""
    wanted = gpu_type.strip().lower()
    for name in tier_names:
        if name.lower() == wanted:
            return name
    return None


# --- nodes and GPUs ----------------------------------------------------------------------


def _ensure_node(session: Session, name: str, now: datetime) -> Node:
    node = session.get(Node, name)
    if node is None:
        node = Node(name=name, state=NodeState.UP.value, admin_drained=False, updated_at=now)
        session.add(node)
        session.flush()
    return node


def _set_gpu_count(session: Session, node: str, tier_id: object, wanted: int) -> tuple[int, int]:
    """Make the node have GPUs 0..wanted-1 of the tier (keeping existing rows' flags)."""
    have = sorted(
        session.scalars(
            select(GpuResource.gpu_index).where(
                GpuResource.node_name == node, GpuResource.tier_id == tier_id
            )
        )
    )
    added = removed = 0
    missing = sorted(set(range(wanted)) - set(have))
    for index in missing:
        session.add(GpuResource(node_name=node, tier_id=tier_id, gpu_index=index, schedulable=True))
        added += 1
    extra = [i for i in have if i >= wanted]
    if extra:
        session.execute(
            delete(GpuResource).where(
                GpuResource.node_name == node,
                GpuResource.tier_id == tier_id,
                GpuResource.gpu_index.in_(extra),
            )
        )
        removed = len(extra)
    return added, removed


def set_node_gpus(
    session: Session, node: str, gpus: Mapping[str, int], now: datetime
) -> tuple[int, int]:
    """Replace the node's GPUs: tier name -> count; tiers not named lose their GPUs.

    Returns (GPU rows added, removed). Unknown tier names raise NotFound.
    """
    _ensure_node(session, node, now)
    tier_ids = dict(session.execute(select(GpuTier.name, GpuTier.id)).all())
    wanted: dict[object, int] = {}
    for tier_name, count in gpus.items():
        if tier_name not in tier_ids:
            raise NotFound("tier", tier_name)
        if count < 0:
            raise InvalidRequest(f"node {node}: negative GPU count for {tier_name}")
        wanted[tier_ids[tier_name]] = wanted.get(tier_ids[tier_name], 0) + count
    present = set(
        session.scalars(select(GpuResource.tier_id).where(GpuResource.node_name == node).distinct())
    )
    added = removed = 0
    for tier_id in present | set(wanted):
        a, r = _set_gpu_count(session, node, tier_id, wanted.get(tier_id, 0))
        added += a
        removed += r
    session.flush()
    return added, removed


def sync_inventory(
    session: Session,
    groups: Iterable[GpuGroup],
    now: datetime,
    *,
    mark_missing_down: bool = False,
) -> SyncReport:
    """Bring nodes, their observed state and their GPUs in line with what the executor sees.

    Every node named in `groups` gets exactly the GPUs listed (GPU type mapped to the tier
    of that name); groups of unknown GPU types are skipped and reported. Nodes not named
    are left alone, or marked down if `mark_missing_down` (their capacity stays: SPEC §1).
    An admin's drain is never touched here.
    """
    tier_names = list(session.scalars(select(GpuTier.name)))
    per_node: dict[str, dict[str, int]] = defaultdict(dict)
    states: dict[str, NodeState] = {}
    unknown: list[tuple[str, str]] = []
    for g in groups:
        per_node.setdefault(g.node, {})
        state = states.get(g.node)
        if state is None or _STATE_RANK[g.state] > _STATE_RANK[state]:
            states[g.node] = g.state
        tier = tier_for_gpu_type(g.gpu_type, tier_names)
        if tier is None:
            unknown.append((g.node, g.gpu_type))
            continue
        per_node[g.node][tier] = per_node[g.node].get(tier, 0) + g.total
    added = removed = 0
    for node_name, gpus in sorted(per_node.items()):
        a, r = set_node_gpus(session, node_name, gpus, now)
        added += a
        removed += r
        set_node_state(session, node_name, states[node_name], now)
    marked: list[str] = []
    if mark_missing_down:
        for node in session.scalars(select(Node).where(Node.name.not_in(list(per_node)))):
            if node.state != NodeState.DOWN.value:
                node.state = NodeState.DOWN.value
                node.state_reason = "not reported by the executor"
                node.observed_at = now
                node.updated_at = now
                marked.append(node.name)
    session.flush()
    return SyncReport(tuple(sorted(per_node)), added, removed, tuple(unknown), tuple(marked))


def set_node_state(
    session: Session, node: str, state: NodeState, now: datetime, reason: str | None = None
) -> None:
    """Record the node's state as the executor observes it (up / down / drain)."""
    row = _ensure_node(session, node, now)
    if row.state != state.value or row.state_reason != reason:
        row.state = state.value
        row.state_reason = reason
        row.updated_at = now
    row.observed_at = now
    session.flush()


def drain_node(session: Session, node: str, reason: str, now: datetime) -> None:
    """An admin closes the node to new work (R5 releases reservations on it next cycle)."""
    _set_drain(session, node, reason, now)


def undrain_node(session: Session, node: str, now: datetime) -> None:
    _set_drain(session, node, None, now)


def _set_drain(session: Session, node: str, reason: str | None, now: datetime) -> None:
    """Drained with `reason`, or open again when it is None."""
    row = session.get(Node, node)
    if row is None:
        raise NotFound("node", node)
    row.admin_drained = reason is not None
    row.drain_reason = reason
    row.updated_at = now
    session.flush()


def remove_node(session: Session, node: str) -> None:
    """Take the node and its GPUs out of the inventory (they leave the capacity: SPEC §1).

    Jobs keep the node's name in their history; reservations on it are released by R5.
    """
    row = session.get(Node, node)
    if row is None:
        raise NotFound("node", node)
    session.execute(delete(GpuResource).where(GpuResource.node_name == node))
    session.delete(row)
    session.flush()


def set_gpu_schedulable(
    session: Session, node: str, tier: str, gpu_index: int, schedulable: bool
) -> None:
    """Take one GPU out of (or back into) the capacity without forgetting it."""
    tier_id = session.scalars(select(GpuTier.id).where(GpuTier.name == tier)).one_or_none()
    if tier_id is None:
        raise NotFound("tier", tier)
    result = session.execute(
        update(GpuResource)
        .where(
            GpuResource.node_name == node,
            GpuResource.tier_id == tier_id,
            GpuResource.gpu_index == gpu_index,
        )
        .values(schedulable=schedulable)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount == 0:  # type: ignore[attr-defined]
        raise NotFound("gpu", (node, tier, gpu_index))


def list_nodes(session: Session) -> list[NodeRecord]:
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    rows = session.execute(
        select(GpuResource.node_name, GpuTier.name, func.count())
        .join(GpuTier, GpuTier.id == GpuResource.tier_id)
        .where(GpuResource.schedulable.is_(True))
        .group_by(GpuResource.node_name, GpuTier.name)
    )
    for node_name, tier_name, count in rows:
        counts[node_name][tier_name] = count
    return [
        NodeRecord(
            n.name,
            NodeState(n.state),
            n.state_reason,
            n.admin_drained,
            n.drain_reason,
            n.observed_at,
            n.updated_at,
            counts.get(n.name, {}),
        )
        for n in session.scalars(select(Node).order_by(Node.name))
    ]


# --- placements --------------------------------------------------------------------------


def placements(session: Session, busy: Mapping[PlacementKey, int] | None = None) -> list[Placement]:
    """Every placement (SPEC §1) with its capacity, `busy` from the caller's observation.

    `busy` maps (node, tier name) to GPUs research jobs use now (missing = 0). A placement
    is schedulable when its node is observed up and not drained by an admin.
    """
    busy = busy or {}
    rows = session.execute(
        select(GpuResource.node_name, GpuTier.name, func.count(), Node.state, Node.admin_drained)
        .join(GpuTier, GpuTier.id == GpuResource.tier_id)
        .join(Node, Node.name == GpuResource.node_name)
        .where(GpuResource.schedulable.is_(True))
        .group_by(GpuResource.node_name, GpuTier.name, Node.state, Node.admin_drained)
        .order_by(GpuResource.node_name, GpuTier.name)
    )
    return [
        Placement(
            node=node,
            tier=tier,
            capacity=count,
            busy=busy.get((node, tier), 0),
            schedulable=state == NodeState.UP.value and not drained,
        )
        for node, tier, count, state, drained in rows
    ]


def observed_busy(groups: Iterable[GpuGroup], tier_names: Iterable[str]) -> dict[PlacementKey, int]:
    """`busy` for `placements()` from an executor's inventory: used GPUs per (node, tier)."""
    names = list(tier_names)
    out: dict[PlacementKey, int] = {}
    for g in groups:
        tier = tier_for_gpu_type(g.gpu_type, names)
        if tier is not None:
            out[(g.node, tier)] = out.get((g.node, tier), 0) + g.used
    return out
