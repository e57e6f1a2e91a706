"""CLUSTER.yaml: the cluster description (docs/formats.md §1), parsed into plain policy types.

    tiers:
      - {name: rtx4090, tflops: 82.6, sort_order: 20, max_gpus: 8, auto_assign: true,
         cpus_per_gpu: 8, mem_per_gpu: 32G}   # optional: the jobs' defaults (the service's)
    nodes:
      - {name: node-c, gpus: {rtx4090: 4, rtx3080ti: 4}}   # two placements
    labs: {BCG: 24000}                          # optional starting usage, TFLOP-seconds
    events:                                     # optional
      - {time: 300, node: node-a, state: down}  # down | up

`load_cluster(path)` returns a `ClusterSpec`: `Tier`s and one `Placement` per (node, tier),
ready for the policy. Nothing here knows about the simulator, so the service's
`jpushare init --cluster` can load the same file. Every error is a `ClusterFileError` that
names the file and line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from jpushare.formats.errors import ClusterFileError
from jpushare.memory_sizes import parse_mem_mb
from jpushare.policy.fit import MAX_GPUS
from jpushare.policy.model import Placement, Tier
from jpushare.vocabulary import NodeState

_TOP_KEYS = ("tiers", "nodes", "labs", "events")
_TIER_KEYS = (
    "name",
    "tflops",
    "sort_order",
    "max_gpus",
    "auto_assign",
    "partition",
    "cpus_per_gpu",
    "mem_per_gpu",
)
_NODE_KEYS = ("name", "gpus")
_EVENT_KEYS = ("time", "node", "state")


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """A node goes down or comes back up at `time` (seconds)."""

    time: float
    node: str
    state: NodeState
    line: int = 0


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """A parsed CLUSTER.yaml. `placements` are sorted by (node, tier), all schedulable, idle."""

    tiers: tuple[Tier, ...]
    placements: tuple[Placement, ...]
    labs: Mapping[str, float] = field(default_factory=dict)  # starting usage, TFLOP-seconds
    events: tuple[NodeEvent, ...] = ()  # in time order (file order among equal times)
    source: str = "<cluster>"
    # tier name -> its jobs' default (CPUs, MiB) per GPU; the simulator ignores them.
    tier_resources: Mapping[str, tuple[int | None, int | None]] = field(default_factory=dict)

    def placements_of(self, node: str) -> tuple[Placement, ...]:
        return tuple(p for p in self.placements if p.node == node)

    @property
    def capacity_gpus(self) -> int:
        return sum(p.capacity for p in self.placements)


class _Map(dict[Any, Any]):
    """A YAML mapping that remembers the line it started on."""

    line: int = 0


class _Loader(yaml.SafeLoader):
    """SafeLoader whose mappings carry their line and reject duplicate keys."""


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> _Map:
    loader.flatten_mapping(node)
    out = _Map()
    out.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in out:
            raise ClusterFileError(
                loader.name, key_node.start_mark.line + 1, f"duplicate key {key!r}"
            )
        out[key] = loader.construct_object(value_node, deep=True)
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)


def load_cluster(path: str | Path) -> ClusterSpec:
    """Read and check a CLUSTER.yaml file."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ClusterFileError(source, 0, f"cannot read the cluster file: {e.strerror}") from e
    return parse_cluster(text, source)


def parse_cluster(text: str, source: str = "<cluster>") -> ClusterSpec:
    """Parse CLUSTER.yaml text; `source` names it in error messages."""
    loader = _Loader(text)
    loader.name = source
    try:
        doc = loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else 0
        raise ClusterFileError(source, line, f"not valid YAML: {e.problem or e}") from e
    except yaml.YAMLError as e:
        raise ClusterFileError(source, 0, f"not valid YAML: {e}") from e
    finally:
        loader.dispose()

    if not isinstance(doc, _Map):
        raise ClusterFileError(source, 1, "expected a mapping with 'tiers' and 'nodes'")
    _check_keys(source, doc, _TOP_KEYS, "the cluster file")
    for key in ("tiers", "nodes"):
        if key not in doc:
            raise ClusterFileError(source, doc.line, f"missing '{key}'")

    tiers = _parse_tiers(source, doc["tiers"], doc.line)
    placements, nodes = _parse_nodes(source, doc["nodes"], doc.line, {t.name for t in tiers})
    labs = _parse_labs(source, doc.get("labs"), doc.line)
    events = _parse_events(source, doc.get("events"), doc.line, nodes)
    resources = _parse_tier_resources(source, doc["tiers"], doc.line)
    return ClusterSpec(tiers, placements, labs, events, source, resources)


def _check_keys(source: str, m: _Map, allowed: tuple[str, ...], what: str) -> None:
    for key in m:
        if key not in allowed:
            raise ClusterFileError(
                source,
                m.line,
                f"unknown key {key!r} in {what} (allowed: {', '.join(allowed)})",
            )


def _list(source: str, value: object, line: int, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ClusterFileError(source, line, f"'{what}' must be a list")
    return value


def _entries(source: str, value: object, line: int, what: str) -> list[_Map]:
    out: list[_Map] = []
    for item in _list(source, value, line, what):
        if not isinstance(item, _Map):
            raise ClusterFileError(source, line, f"each entry of '{what}' must be a mapping")
        out.append(item)
    return out


def _text(source: str, m: _Map, key: str, what: str) -> str:
    value = m.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ClusterFileError(source, m.line, f"{what} needs '{key}' as non-empty text")
    return value.strip()


def _number(source: str, line: int, value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ClusterFileError(source, line, f"{what} must be a number, got {value!r}")
    return float(value)


def _integer(source: str, line: int, value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ClusterFileError(source, line, f"{what} must be a whole number, got {value!r}")
    return value


def _parse_tiers(source: str, value: object, line: int) -> tuple[Tier, ...]:
    entries = _entries(source, value, line, "tiers")
    if not entries:
        raise ClusterFileError(source, line, "'tiers' must list at least one tier")
    tiers: list[Tier] = []
    seen: set[str] = set()
    for m in entries:
        _check_keys(source, m, _TIER_KEYS, "a tier")
        name = _text(source, m, "name", "a tier")
        if name in seen:
            raise ClusterFileError(source, m.line, f"tier {name!r} is defined twice")
        seen.add(name)
        for key in ("tflops", "sort_order"):
            if key not in m:
                raise ClusterFileError(source, m.line, f"tier {name!r} needs '{key}'")
        tflops = _number(source, m.line, m["tflops"], f"tier {name!r}: tflops")
        if tflops <= 0:
            raise ClusterFileError(source, m.line, f"tier {name!r}: tflops must be > 0")
        sort_order = _integer(source, m.line, m["sort_order"], f"tier {name!r}: sort_order")
        max_gpus = _integer(source, m.line, m.get("max_gpus", MAX_GPUS), f"tier {name!r}: max_gpus")
        if not 1 <= max_gpus <= MAX_GPUS:
            raise ClusterFileError(
                source, m.line, f"tier {name!r}: max_gpus must be 1-{MAX_GPUS}, got {max_gpus}"
            )
        auto_assign = m.get("auto_assign", True)
        if not isinstance(auto_assign, bool):
            raise ClusterFileError(
                source, m.line, f"tier {name!r}: auto_assign must be true or false"
            )
        partition = m.get("partition")
        if partition is not None and not isinstance(partition, str):
            raise ClusterFileError(source, m.line, f"tier {name!r}: partition must be text")
        tiers.append(Tier(name, tflops, sort_order, max_gpus, auto_assign, partition))
    if not any(t.auto_assign for t in tiers):
        raise ClusterFileError(source, line, "at least one tier must have auto_assign: true")
    return tuple(tiers)


def _parse_tier_resources(
    source: str, value: object, line: int
) -> dict[str, tuple[int | None, int | None]]:
    """Each tier's `cpus_per_gpu` and `mem_per_gpu` (a size: 32G, 512M), where given."""
    out: dict[str, tuple[int | None, int | None]] = {}
    for m in _entries(source, value, line, "tiers"):
        name = _text(source, m, "name", "a tier")
        cpus = m.get("cpus_per_gpu")
        if cpus is not None:
            cpus = _integer(source, m.line, cpus, f"tier {name!r}: cpus_per_gpu")
            if cpus < 1:
                raise ClusterFileError(source, m.line, f"tier {name!r}: cpus_per_gpu must be >= 1")
        mem = m.get("mem_per_gpu")
        if mem is not None:
            try:
                mem = parse_mem_mb(mem)
            except ValueError as exc:
                raise ClusterFileError(
                    source, m.line, f"tier {name!r}: mem_per_gpu: {exc}"
                ) from exc
        if cpus is not None or mem is not None:
            out[name] = (cpus, mem)
    return out


def _parse_nodes(
    source: str, value: object, line: int, tier_names: set[str]
) -> tuple[tuple[Placement, ...], set[str]]:
    entries = _entries(source, value, line, "nodes")
    if not entries:
        raise ClusterFileError(source, line, "'nodes' must list at least one node")
    placements: list[Placement] = []
    names: set[str] = set()
    for m in entries:
        _check_keys(source, m, _NODE_KEYS, "a node")
        name = _text(source, m, "name", "a node")
        if name in names:
            raise ClusterFileError(source, m.line, f"node {name!r} is listed twice")
        names.add(name)
        gpus = m.get("gpus")
        if not isinstance(gpus, _Map) or not gpus:
            raise ClusterFileError(
                source, m.line, f"node {name!r} needs 'gpus' as a mapping tier -> count"
            )
        for tier, count in gpus.items():
            if tier not in tier_names:
                raise ClusterFileError(
                    source,
                    gpus.line,
                    f"node {name!r} has GPUs of unknown tier {tier!r} "
                    f"(tiers: {', '.join(sorted(tier_names))})",
                )
            n = _integer(source, gpus.line, count, f"node {name!r}: GPU count of {tier}")
            if n < 1:
                raise ClusterFileError(
                    source, gpus.line, f"node {name!r}: GPU count of {tier} must be >= 1"
                )
            placements.append(Placement(name, tier, n))
    placements.sort(key=lambda p: p.key)
    return tuple(placements), names


def _parse_labs(source: str, value: object, line: int) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, _Map):
        raise ClusterFileError(source, line, "'labs' must be a mapping lab -> starting usage")
    labs: dict[str, float] = {}
    for lab, usage in value.items():
        if not isinstance(lab, str) or not lab:
            raise ClusterFileError(
                source, value.line, f"lab names must be text (quote {lab!r} if needed)"
            )
        u = _number(source, value.line, usage, f"starting usage of lab {lab!r}")
        if u < 0:
            raise ClusterFileError(source, value.line, f"starting usage of lab {lab!r} is < 0")
        labs[lab] = u
    return labs


def _parse_events(source: str, value: object, line: int, nodes: set[str]) -> tuple[NodeEvent, ...]:
    events: list[NodeEvent] = []
    for m in _entries(source, value, line, "events"):
        _check_keys(source, m, _EVENT_KEYS, "an event")
        for key in _EVENT_KEYS:
            if key not in m:
                raise ClusterFileError(source, m.line, f"an event needs '{key}'")
        time = _number(source, m.line, m["time"], "event time")
        if time < 0:
            raise ClusterFileError(source, m.line, "event time must be >= 0")
        node = m["node"]
        if node not in nodes:
            raise ClusterFileError(source, m.line, f"event for unknown node {node!r}")
        state = m["state"]
        if state in (NodeState.DOWN, NodeState.UP):
            events.append(NodeEvent(time, node, NodeState(state), m.line))
        else:
            raise ClusterFileError(
                source, m.line, f"event state must be 'down' or 'up', got {state!r}"
            )
    events.sort(key=lambda e: e.time)  # stable: file order among equal times
    return tuple(events)
