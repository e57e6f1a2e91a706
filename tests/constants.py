"""The facts many tests share: the GPU tiers, a fixed start time, the small clusters.

One place for them, so a test says which cluster it uses rather than writing it again.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from jpushare.executors.base import GpuGroup, NodeState
from jpushare.policy import Tier

T0 = datetime(2026, 1, 5, 9, 0, 0, tzinfo=UTC)  # a Monday morning

RTX3080TI = Tier("rtx3080ti", tflops=34.1, sort_order=10)
RTX4090 = Tier("rtx4090", tflops=82.6, sort_order=20)
RTX5090 = Tier("rtx5090", tflops=104.8, sort_order=30)
TIERS = (RTX3080TI, RTX4090, RTX5090)
TFLOPS = {t.name: t.tflops for t in TIERS}

# The store's and the API's cluster: each tier in a partition of its own;
# node-a: 4x3080ti; node-b: 4x4090; node-c: 4x4090 + 4x5090 (two placements).
PARTITIONED_TIERS = tuple(
    replace(t, partition=p) for t, p in zip(TIERS, ("p3080", "p4090", "p5090"), strict=True)
)
GROUPS = (
    GpuGroup("node-a", "rtx3080ti", 4, 0, NodeState.UP),
    GpuGroup("node-b", "rtx4090", 4, 0, NodeState.UP),
    GpuGroup("node-c", "rtx4090", 4, 0, NodeState.UP),
    GpuGroup("node-c", "rtx5090", 4, 0, NodeState.UP),
)

# The dispatcher's cluster: node-a: 2 x rtx4090 (one placement); node-b: 1 x rtx3080ti.
SMALL_CLUSTER_YAML = """
tiers:
  - {name: rtx3080ti, tflops: 34.1, sort_order: 10}
  - {name: rtx4090, tflops: 82.6, sort_order: 20}
nodes:
  - {name: node-a, gpus: {rtx4090: 2}}
  - {name: node-b, gpus: {rtx3080ti: 1}}
labs: {alpha: 0, beta: 0}
"""
SMALL_CLUSTER_GPUS = (("node-a", "rtx4090", 2), ("node-b", "rtx3080ti", 1))
