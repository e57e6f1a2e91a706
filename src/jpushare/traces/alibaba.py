"""Alibaba openb GPU pods (cluster-trace-gpu-v2023, FGD ATC'23) → TRACE.csv.

Source: `data/traces/alibaba_openb_2023/openb_pod_list_default.csv`, columns
`name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
deletion_time,scheduled_time` (seconds). It is a snapshot of pods, not a job log: Running
pods are still alive when the trace stops seeing them, Pending pods never started.

Decisions (each one is counted in the `LoadReport` and printed by `jpushare trace alibaba`),
applied in this order, a pod being counted under the first rule that drops it:

1. **Pending pods** (no `scheduled_time`, 897): never ran, so there is no duration: dropped.
2. **Window** (optional, e.g. `--window last35d`): pods created before
   `last creation − window` are dropped. The first ~114 days hold only 26 pods, 24 of them
   GPU pods that ran (long-lived services, most still Running at the snapshot); the last
   ~35 days hold the rest. With `carry_over=True` (`--carry-over`) the pods created before
   the window that are still running when it opens enter at the window start (t = 0) with
   their remaining duration, so the replay starts with that standing load.
3. **GPU-less pods** (`num_gpu` 0, CPU-only; 1,088 in the file, 1,052 once Pending ones
   are counted): JPU-Share schedules GPUs only (SPEC §2: 1–8 GPUs): dropped.
4. **Fractional GPUs** (`num_gpu` 1 with `gpu_milli` < 1000, a GPU shared with other pods;
   3,078 in the file, 2,573 of them not Pending): JPU-Share hands out whole GPUs, so such
   a pod would get one GPU of its own. Default `fractional="whole"`: kept as a 1-GPU job
   (counted as adjusted; this makes the load heavier than on Alibaba's GPU-sharing
   cluster). `fractional="drop"` drops them instead.
5. **Over 8 GPUs**: none in this file (`num_gpu` is 0–8); dropped if present. Every pod
   runs on one node, so there are no multi-node jobs.
6. `duration = deletion_time − scheduled_time`; a non-positive duration is dropped.

Other fields:

- `submit_time = creation_time` (the original scheduling delay is the original scheduler's
  doing and is not replayed). Times are rebased so the first kept pod is submitted at 0.
- **Running pods** keep `deletion_time − scheduled_time`: the time the trace saw them run,
  cut at the snapshot, so their durations are lower bounds (counted as adjusted).
  **Failed** pods keep the time they ran; **Succeeded** pods are plain jobs.
- **Labs.** There is no user column. Default `lab_by="hash"`: lab `lab<k>` with
  `k = crc32(pod name) % labs` (default 6 labs): deterministic across runs and machines and
  independent of the window, but the labs are statistically alike (no lab is "the big
  one"). `lab_by="qos"` uses the pod's QoS class instead (`ls`, `be`, `burstable`,
  `guaranteed`): a real attribute, but very unequal (4,647 LS vs 7 Guaranteed pods).
- **gpu_spec → min_tier.** `gpu_spec` lists acceptable models (`V100M16|V100M32`). TRACE.csv
  can only say "this tier or stronger", so `min_tier` is the weakest listed model's tier
  (in `ALIBABA_TIERS` order); a spec naming no known model leaves `min_tier` empty
  (counted). This is an approximation: it also allows stronger models than those listed.
  The default pod list has no `gpu_spec` at all, so every `min_tier` is empty there.
- **time_limit**: as for Philly, `hour_time_limit(duration)` (whole hours, >= 1 h) by
  default, or empty with `time_limit="none"`.
- `job_id` is the pod name (`openb-pod-0000`: zero-padded, text order = trace order).

`ALIBABA_TIERS` gives each GPU model the trace names a tier with an approximate FP32 peak
TFLOPS (the convention of SPEC §1's examples), from NVIDIA's public datasheets: Tesla T4 8.1,
Tesla P100 PCIe 9.3, Tesla V100 SXM2 15.7 (16 and 32 GB alike), A10 31.2. G1, G2 and G3 are
undisclosed internal models: their figures are placeholders (G1 V100-class 15.7, G2 and G3
A100-class 19.5), chosen only so that accounting has a weight; sort order follows TFLOPS,
then memory (V100M32 above V100M16), then name.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from jpushare.traces import (
    MAX_GPUS_PER_JOB,
    LoadReport,
    TraceRow,
    TraceWindow,
    csv_records,
    hour_time_limit,
    read_csv_file,
    window_start,
)

ALIBABA_POD_COLUMNS: tuple[str, ...] = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
ALIBABA_NODE_COLUMNS: tuple[str, ...] = ("sn", "cpu_milli", "memory_mib", "gpu", "model")


@dataclass(frozen=True, slots=True)
class ModelTier:
    """A GPU model of the Alibaba trace as a JPU-Share tier (approximate FP32 TFLOPS)."""

    model: str  # as written in the trace (G2, V100M16, ...)
    name: str  # tier name (lower case)
    tflops: float
    sort_order: int
    source: str  # where the TFLOPS figure comes from


ALIBABA_TIERS: tuple[ModelTier, ...] = (
    ModelTier("T4", "t4", 8.1, 10, "NVIDIA Tesla T4 datasheet, FP32 peak"),
    ModelTier("P100", "p100", 9.3, 20, "NVIDIA Tesla P100 PCIe datasheet, FP32 peak"),
    ModelTier("V100M16", "v100m16", 15.7, 30, "NVIDIA Tesla V100 SXM2 datasheet, FP32 peak"),
    ModelTier("V100M32", "v100m32", 15.7, 40, "NVIDIA Tesla V100 SXM2 datasheet, FP32 peak"),
    ModelTier("G1", "g1", 15.7, 50, "undisclosed model: placeholder (V100-class)"),
    ModelTier("G2", "g2", 19.5, 60, "undisclosed model: placeholder (A100-class)"),
    ModelTier("G3", "g3", 19.5, 70, "undisclosed model: placeholder (A100-class)"),
    ModelTier("A10", "a10", 31.2, 80, "NVIDIA A10 datasheet, FP32 peak"),
)
TIER_BY_MODEL: dict[str, ModelTier] = {t.model.upper(): t for t in ALIBABA_TIERS}

Fractional = Literal["whole", "drop"]
LabBy = Literal["hash", "qos"]
TimeLimitRule = Literal["hour", "none"]


@dataclass(frozen=True, slots=True)
class AlibabaPod:
    """One raw pod row; absent times are None (Pending pods have no `scheduled_time`)."""

    name: str
    num_gpu: int
    gpu_milli: int
    gpu_spec: str
    qos: str
    phase: str
    creation_time: int
    deletion_time: int | None
    scheduled_time: int | None


@dataclass(frozen=True, slots=True)
class AlibabaOptions:
    """How to convert; the defaults are the documented choices of the module docstring."""

    labs: int = 6
    lab_by: LabBy = "hash"
    fractional: Fractional = "whole"
    time_limit: TimeLimitRule = "hour"
    window_s: int | None = None
    carry_over: bool = False


def _opt_int(text: str | None) -> int | None:
    value = (text or "").strip()
    if value == "" or value.lower() == "nan":
        return None
    return int(float(value))


def parse_alibaba_pods(lines: Iterable[str]) -> list[AlibabaPod]:
    """Parse the raw pod CSV text (header included)."""
    reader = csv_records(lines, ALIBABA_POD_COLUMNS, "an Alibaba openb pod list")
    pods: list[AlibabaPod] = []
    for record in reader:
        spec = record["gpu_spec"].strip()
        pods.append(
            AlibabaPod(
                name=record["name"].strip(),
                num_gpu=int(record["num_gpu"]),
                gpu_milli=_opt_int(record["gpu_milli"]) or 0,
                gpu_spec="" if spec.lower() == "nan" else spec,
                qos=record["qos"].strip(),
                phase=record["pod_phase"].strip(),
                creation_time=_opt_int(record["creation_time"]) or 0,
                deletion_time=_opt_int(record["deletion_time"]),
                scheduled_time=_opt_int(record["scheduled_time"]),
            )
        )
    return pods


def read_alibaba_pods(path: str | Path) -> list[AlibabaPod]:
    """`parse_alibaba_pods` on a file."""
    return read_csv_file(path, parse_alibaba_pods)


def spec_to_min_tier(spec: str) -> str | None:
    """`V100M16|V100M32` -> `v100m16` (the weakest known model listed); None if none known."""
    known = [
        TIER_BY_MODEL[m.strip().upper()]
        for m in spec.split("|")
        if m.strip().upper() in TIER_BY_MODEL
    ]
    if not known:
        return None
    return min(known, key=lambda t: (t.sort_order, t.name)).name


def alibaba_lab(pod: AlibabaPod, lab_by: LabBy = "hash", labs: int = 6) -> str:
    """The lab of a pod: `lab<crc32(name) % labs>`, or its QoS class in lower case."""
    if lab_by == "qos":
        return pod.qos.lower() or "none"
    if labs < 1:
        raise ValueError("labs must be >= 1")
    return f"lab{zlib.crc32(pod.name.encode('utf-8')) % labs}"


def convert_alibaba(
    pods: Sequence[AlibabaPod], options: AlibabaOptions | None = None
) -> tuple[list[TraceRow], LoadReport]:
    """Pods -> trace rows (rebased to start at 0) and the counts of what was done."""
    opts = options or AlibabaOptions()
    report = LoadReport(source="alibaba")
    window = TraceWindow(
        report, window_start((p.creation_time for p in pods), opts.window_s), opts.carry_over
    )
    rows: list[TraceRow] = []
    for pod in pods:
        report.read += 1
        if pod.scheduled_time is None or pod.deletion_time is None:
            report.drop("Pending (never scheduled, no times)")
            continue
        placed = window.place(
            pod.creation_time,
            pod.deletion_time - pod.scheduled_time,
            "created before the window",
        )
        if placed is None:
            continue
        submit, duration = placed
        if pod.num_gpu < 1:
            report.drop("no GPU (CPU-only pod)")
            continue
        fractional = pod.num_gpu == 1 and 0 < pod.gpu_milli < 1000
        if fractional and opts.fractional == "drop":
            report.drop("fractional GPU (gpu_milli < 1000)")
            continue
        if pod.num_gpu > MAX_GPUS_PER_JOB:
            report.drop("over 8 GPUs")
            continue
        if duration <= 0:
            report.drop("duration <= 0")
            continue
        if fractional:
            report.adjusted["fractional GPU rounded up to 1 whole GPU"] += 1
        if submit != pod.creation_time:
            report.adjusted["running at the window start: carried over, remaining duration"] += 1
        if pod.phase == "Running":
            report.adjusted["Running: duration cut at the snapshot (lower bound)"] += 1
        min_tier: str | None = None
        if pod.gpu_spec:
            min_tier = spec_to_min_tier(pod.gpu_spec)
            if min_tier is None:
                report.adjusted["gpu_spec names no known model: min_tier empty"] += 1
        rows.append(
            TraceRow(
                job_id=pod.name,
                submit_time=submit,
                duration=duration,
                num_gpus=pod.num_gpu,
                lab=alibaba_lab(pod, opts.lab_by, opts.labs),
                min_tier=min_tier,
                time_limit=hour_time_limit(duration) if opts.time_limit == "hour" else None,
            )
        )
    return window.finish(rows)


def load_alibaba(
    path: str | Path, options: AlibabaOptions | None = None
) -> tuple[list[TraceRow], LoadReport]:
    """Read and convert the Alibaba pod list at `path`."""
    return convert_alibaba(read_alibaba_pods(path), options)


__all__ = [
    "ALIBABA_NODE_COLUMNS",
    "ALIBABA_POD_COLUMNS",
    "ALIBABA_TIERS",
    "TIER_BY_MODEL",
    "AlibabaOptions",
    "AlibabaPod",
    "ModelTier",
    "alibaba_lab",
    "convert_alibaba",
    "load_alibaba",
    "parse_alibaba_pods",
    "read_alibaba_pods",
    "spec_to_min_tier",
]
