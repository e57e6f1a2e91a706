"""Example clusters (CLUSTER.yaml, docs/formats.md §1) for replaying the real traces.

- `philly_cluster`: a synthetic cluster of the project's own tiers (RTX 3080 Ti / 4090 /
  5090, SPEC §1's TFLOPS), mostly 8-GPU nodes, sized for the Philly last-10-days replay.
- `alibaba_cluster`: a deterministic, proportional sample of Alibaba's real node list
  (`openb_node_list_gpu_node.csv`), its GPU models mapped to tiers by
  `jpushare.traces.alibaba.ALIBABA_TIERS`.
- `cluster_yaml`: the YAML text, one flow-style line per tier and node (docs/formats.md §1).
- `cluster_gpus`: total GPUs of a CLUSTER.yaml (for offered-load figures).

The shipped `examples/philly-cluster.yaml` and `examples/alibaba-cluster.yaml` are the output
of `jpushare trace cluster philly|alibaba` with the options written in their header comment.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from jpushare.traces.alibaba import ALIBABA_NODE_COLUMNS, TIER_BY_MODEL


@dataclass(frozen=True, slots=True)
class TierSpec:
    """One `tiers:` entry of CLUSTER.yaml."""

    name: str
    tflops: float
    sort_order: int
    max_gpus: int = 8
    auto_assign: bool = True


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One `nodes:` entry: a node and its GPUs per tier (two tiers = two placements)."""

    name: str
    gpus: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """A whole CLUSTER.yaml: tiers, nodes, optional starting lab usage."""

    tiers: Sequence[TierSpec]
    nodes: Sequence[NodeSpec]
    labs: Mapping[str, float] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return sum(sum(n.gpus.values()) for n in self.nodes)

    def gpus_by_tier(self) -> dict[str, int]:
        totals: Counter[str] = Counter()
        for node in self.nodes:
            totals.update(node.gpus)
        return dict(sorted(totals.items()))


# SPEC §1's example tiers (FP32 TFLOPS per GPU).
PROJECT_TIERS: tuple[TierSpec, ...] = (
    TierSpec("rtx3080ti", 34.1, 10),
    TierSpec("rtx4090", 82.6, 20),
    TierSpec("rtx5090", 104.8, 30),
)

# Philly example: (tier, GPUs per node, node count). 144 nodes, 1,024 GPUs.
PHILLY_LAYOUT: tuple[tuple[str, int, int], ...] = (
    ("rtx5090", 8, 32),
    ("rtx4090", 8, 48),
    ("rtx3080ti", 8, 32),
    ("rtx3080ti", 4, 32),
)


def philly_cluster(
    layout: Sequence[tuple[str, int, int]] = PHILLY_LAYOUT, scale: float = 1.0
) -> ClusterSpec:
    """Homogeneous nodes per `layout` row, node counts multiplied by `scale` (rounded, >= 1).

    Node names are `<tier>-<gpus>g-<nnn>` so that text order groups them by kind.
    """
    nodes: list[NodeSpec] = []
    used: set[str] = set()
    for tier, per_node, count in layout:
        n = max(1, round(count * scale))
        for i in range(n):
            name = f"{tier}-{per_node}g-{i:03d}"
            if name in used:
                raise ValueError(f"duplicate node name {name}: one layout row per kind")
            used.add(name)
            nodes.append(NodeSpec(name, {tier: per_node}))
    tiers_used = {t for t, _, _ in layout}
    return ClusterSpec(tiers=[t for t in PROJECT_TIERS if t.name in tiers_used], nodes=nodes)


@dataclass(frozen=True, slots=True)
class AlibabaNode:
    """One row of `openb_node_list_gpu_node.csv`."""

    sn: str
    gpus: int
    model: str


def parse_alibaba_nodes(lines: Iterable[str]) -> list[AlibabaNode]:
    """Parse the node list CSV text (header included); GPU-less rows are skipped."""
    reader = csv.DictReader(lines)
    missing = set(ALIBABA_NODE_COLUMNS) - set(reader.fieldnames or ())
    if missing:
        raise ValueError(f"not an Alibaba openb node list: missing columns {sorted(missing)}")
    nodes = []
    for record in reader:
        gpus = int(record["gpu"] or 0)
        model = record["model"].strip()
        if gpus > 0 and model and model.lower() != "nan":
            nodes.append(AlibabaNode(record["sn"].strip(), gpus, model))
    return nodes


def read_alibaba_nodes(path: str | Path) -> list[AlibabaNode]:
    """`parse_alibaba_nodes` on a file."""
    with Path(path).open(encoding="utf-8", newline="") as stream:
        return parse_alibaba_nodes(stream)


def alibaba_cluster(nodes: Sequence[AlibabaNode], every: int = 1) -> ClusterSpec:
    """Every `every`-th node of the real inventory, in `sn` order (1 = the full cluster).

    Systematic sampling over the node list sorted by serial number keeps each node kind
    (model × GPUs per node) roughly in proportion; the first node is always taken. Node
    names are the original serial numbers. Models without a tier in `ALIBABA_TIERS`
    raise an error rather than vanish silently.
    """
    if every < 1:
        raise ValueError("every must be >= 1")
    ordered = sorted(nodes, key=lambda n: n.sn)
    picked = ordered[::every]
    specs: list[NodeSpec] = []
    models: set[str] = set()
    for node in picked:
        tier = TIER_BY_MODEL.get(node.model.upper())
        if tier is None:
            raise ValueError(f"node {node.sn}: GPU model {node.model!r} has no tier")
        models.add(tier.model.upper())
        specs.append(NodeSpec(node.sn, {tier.name: node.gpus}))
    tiers = [
        TierSpec(t.name, t.tflops, t.sort_order)
        for t in sorted((TIER_BY_MODEL[m] for m in models), key=lambda t: (t.sort_order, t.name))
    ]
    return ClusterSpec(tiers=tiers, nodes=specs)


def _flow(mapping: Mapping[str, Any]) -> str:
    text = yaml.safe_dump(dict(mapping), default_flow_style=True, sort_keys=False, width=10_000)
    return text.strip()


def cluster_yaml(cluster: ClusterSpec, header: Sequence[str] = ()) -> str:
    """CLUSTER.yaml text: optional `# ` comment lines, then tiers, nodes and labs."""
    lines = [f"# {h}".rstrip() for h in header]
    lines.append("tiers:")
    for t in cluster.tiers:
        entry = {
            "name": t.name,
            "tflops": t.tflops,
            "sort_order": t.sort_order,
            "max_gpus": t.max_gpus,
            "auto_assign": t.auto_assign,
        }
        lines.append(f"  - {_flow(entry)}")
    lines.append("nodes:")
    for n in cluster.nodes:
        lines.append(f"  - {_flow({'name': n.name, 'gpus': dict(n.gpus)})}")
    if cluster.labs:
        lines.append(f"labs: {_flow(cluster.labs)}")
    return "\n".join(lines) + "\n"


def cluster_gpus(text: str) -> int:
    """Total GPUs of a CLUSTER.yaml text (sum over nodes of their per-tier counts)."""
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError("CLUSTER.yaml must be a mapping")
    total = 0
    for node in data.get("nodes") or []:
        total += sum(int(v) for v in (node.get("gpus") or {}).values())
    return total


__all__ = [
    "PHILLY_LAYOUT",
    "PROJECT_TIERS",
    "AlibabaNode",
    "ClusterSpec",
    "NodeSpec",
    "TierSpec",
    "alibaba_cluster",
    "cluster_gpus",
    "cluster_yaml",
    "parse_alibaba_nodes",
    "philly_cluster",
    "read_alibaba_nodes",
]
