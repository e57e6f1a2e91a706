"""Loading a cluster description (tiers, nodes and their GPUs, labs) into the store.

What `jpushare init --cluster FILE` and `jpushare serve --demo` do to an empty or existing
database. Idempotent: tiers are upserted, each named node gets exactly the GPUs listed, and
a lab is created with its starting usage only if it does not exist yet (an existing lab's
usage is its history: it is never reset). Nothing here commits.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from jpushare.formats.cluster_file import ClusterSpec
from jpushare.store.accounts import create_lab
from jpushare.store.inventory import set_node_gpus, upsert_tiers
from jpushare.store.schema import GpuResource, GpuTier, Lab


@dataclass(frozen=True, slots=True)
class ClusterLoaded:
    """What `load_cluster_spec` changed."""

    tiers: tuple[str, ...]
    nodes: tuple[str, ...]
    gpus_added: int
    gpus_removed: int
    labs_created: tuple[str, ...]
    labs_kept: tuple[str, ...]


def load_cluster_spec(session: Session, spec: ClusterSpec, now: datetime) -> ClusterLoaded:
    """Tiers, nodes with their GPUs, and missing labs (with starting usage) from `spec`."""
    upsert_tiers(session, spec.tiers, spec.tier_resources)
    per_node: dict[str, dict[str, int]] = defaultdict(dict)
    for p in spec.placements:
        per_node[p.node][p.tier] = p.capacity
    added = removed = 0
    for node, gpus in sorted(per_node.items()):
        a, r = set_node_gpus(session, node, gpus, now)
        added += a
        removed += r
    existing = set(session.scalars(select(Lab.name)))
    created: list[str] = []
    kept: list[str] = []
    for lab, usage in sorted(spec.labs.items()):
        if lab in existing:
            kept.append(lab)
            continue
        create_lab(session, lab, now)
        set_lab_usage(session, lab, usage)
        created.append(lab)
    return ClusterLoaded(
        tuple(t.name for t in spec.tiers),
        tuple(sorted(per_node)),
        added,
        removed,
        tuple(created),
        tuple(kept),
    )


def set_lab_usage(session: Session, lab: str, usage_tflop_s: float) -> None:
    """Set a lab's cumulative usage (a starting value, TFLOP-seconds)."""
    session.execute(
        update(Lab)
        .where(Lab.name == lab)
        .values(cumulative_usage=usage_tflop_s)
        .execution_options(synchronize_session=False)
    )


def inventory_is_empty(session: Session) -> bool:
    """True when no GPU is in the inventory (a fresh database)."""
    return session.scalar(select(func.count()).select_from(GpuResource)) == 0


def declared_inventory(session: Session) -> list[tuple[str, str, int]]:
    """(node, tier name, GPU count) of every GPU row: the local executor's declared GPUs
    when the database already holds the inventory."""
    rows = session.execute(
        select(GpuResource.node_name, GpuTier.name, func.count())
        .join(GpuTier, GpuTier.id == GpuResource.tier_id)
        .group_by(GpuResource.node_name, GpuTier.name)
        .order_by(GpuResource.node_name, GpuTier.name)
    )
    return [(node, tier, n) for node, tier, n in rows]
