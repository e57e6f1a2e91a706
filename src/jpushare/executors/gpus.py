"""Which GPUs one workstation has: NVML, else `nvidia-smi`, else the declared cluster file.

The local executor asks once, at start. Discovery never raises for a missing driver or
tool: a CPU-only machine (CI, a laptop) falls through to the GPUs the cluster file declares,
so the service runs and is tested without a GPU. Parsing and naming are pure functions.

GPU model names become tier-like GPU types by `normalise_gpu_name`:

1. lower-case, and split on spaces, `-` and `_`;
2. drop the words that name the vendor or product line, not the model:
   `nvidia`, `geforce`, `tesla`, `quadro`, `gpu`, `graphics`, `generation`;
3. drop form-factor and memory words: `sxm`, `sxm2`…, `pcie`, `nvl`, `hbm2`, `hbm3`,
   `hbm3e`, and memory sizes like `80gb`;
4. join what is left and keep only letters and digits.

So "NVIDIA GeForce RTX 4090" → `rtx4090`, "NVIDIA GeForce RTX 3080 Ti" → `rtx3080ti`,
"NVIDIA A100-SXM4-80GB" → `a100`, "NVIDIA H100 80GB HBM3" → `h100`, "NVIDIA RTX A6000" →
`rtxa6000`, "Tesla V100-SXM2-16GB" → `v100`. An explicit mapping (raw name → GPU type)
overrides the rule for names it does not fit.
"""

from __future__ import annotations

import contextlib
import logging
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple

log = logging.getLogger(__name__)

_BRAND_WORDS = frozenset({"nvidia", "geforce", "tesla", "quadro", "gpu", "graphics", "generation"})
_FORM_FACTOR = re.compile(r"^(sxm\d*|pcie|nvl|hbm\d*e?|\d+gb)$")

NVIDIA_SMI_QUERY = ("--query-gpu=index,name", "--format=csv,noheader")

Source = Literal["nvml", "nvidia-smi", "declared", "given"]


class DeclaredGpus(NamedTuple):
    """GPUs the cluster file declares: `num_gpus` GPUs of `gpu_type` on `node`."""

    node: str
    gpu_type: str
    num_gpus: int


@dataclass(frozen=True, slots=True)
class LocalGpu:
    """One GPU the local executor may hand to a run.

    `index` is what goes into CUDA_VISIBLE_DEVICES (with CUDA_DEVICE_ORDER=PCI_BUS_ID, the
    NVML / nvidia-smi index). Declared GPUs are numbered 0, 1, … per node in declaration
    order.
    """

    node: str
    index: int
    gpu_type: str
    model: str = ""  # the raw model name, when discovered


@dataclass(frozen=True, slots=True)
class Discovery:
    """What discovery found and where it came from (for the service's start-up log)."""

    gpus: tuple[LocalGpu, ...]
    source: Source


def normalise_gpu_name(name: str, overrides: Mapping[str, str] | None = None) -> str:
    """The GPU type of a model name, e.g. "NVIDIA GeForce RTX 4090" → "rtx4090"."""
    if overrides and name in overrides:
        return overrides[name]
    words = [w for w in re.split(r"[\s\-_]+", name.strip().lower()) if w]
    kept = [w for w in words if w not in _BRAND_WORDS and not _FORM_FACTOR.match(w)]
    return re.sub(r"[^a-z0-9]", "", "".join(kept or words))


def parse_nvidia_smi(text: str) -> list[tuple[int, str]]:
    """(index, model name) per line of `nvidia-smi --query-gpu=index,name --format=csv,noheader`."""
    out: list[tuple[int, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        index, sep, name = line.partition(",")
        if not sep or not index.strip().isdigit():
            raise ValueError(f"unexpected nvidia-smi line: {line!r}")
        out.append((int(index), name.strip()))
    return out


def declared_gpus(declared: Iterable[DeclaredGpus | tuple[str, str, int]]) -> list[LocalGpu]:
    """The declared GPUs as devices, numbered 0, 1, … per node in declaration order."""
    next_index: dict[str, int] = {}
    out: list[LocalGpu] = []
    for node, gpu_type, count in declared:
        if count < 0:
            raise ValueError(f"declared GPU count must be >= 0 ({node}, {gpu_type}: {count})")
        first = next_index.get(node, 0)
        out.extend(LocalGpu(node, first + i, gpu_type) for i in range(count))
        next_index[node] = first + count
    return out


def query_nvml() -> list[tuple[int, str]] | None:
    """(index, model name) per GPU from NVML; None when NVML or its driver is missing."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError and friends: no driver on this machine
        log.debug("NVML unavailable: %s", exc)
        return None
    try:
        found: list[tuple[int, str]] = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            raw = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            found.append((i, raw.decode() if isinstance(raw, bytes) else str(raw)))
        return found
    except Exception as exc:
        log.warning("NVML failed while listing GPUs: %s", exc)
        return None
    finally:
        # Shutting down a half-initialised NVML must not hide the result.
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def query_nvidia_smi(
    command: str = "nvidia-smi", timeout_s: float = 10.0
) -> list[tuple[int, str]] | None:
    """(index, model name) per GPU from nvidia-smi; None when it is missing or fails."""
    try:
        done = subprocess.run(
            [command, *NVIDIA_SMI_QUERY],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.debug("nvidia-smi unavailable: %s", exc)
        return None
    if done.returncode != 0:
        log.debug("nvidia-smi exited %s: %s", done.returncode, done.stderr.strip())
        return None
    try:
        return parse_nvidia_smi(done.stdout)
    except ValueError as exc:
        log.warning("%s", exc)
        return None


def discover_gpus(
    node: str,
    declared: Iterable[DeclaredGpus | tuple[str, str, int]] = (),
    *,
    use_nvml: bool = True,
    nvidia_smi: str | None = "nvidia-smi",
    name_overrides: Mapping[str, str] | None = None,
) -> Discovery:
    """This machine's GPUs: NVML, else nvidia-smi, else `declared` (possibly empty).

    Real GPUs all belong to `node`. Declared GPUs keep their own node names: on a CPU-only
    machine the local executor plays every declared node (a demo or CI cluster).
    """
    sources: list[tuple[Source, list[tuple[int, str]] | None]] = []
    if use_nvml:
        sources.append(("nvml", query_nvml()))
    if nvidia_smi is not None and not any(found for _, found in sources):
        sources.append(("nvidia-smi", query_nvidia_smi(nvidia_smi)))
    for source, found in sources:
        if found:
            gpus = tuple(
                LocalGpu(node, index, normalise_gpu_name(model, name_overrides), model)
                for index, model in found
            )
            return Discovery(gpus, source)
    return Discovery(tuple(declared_gpus(declared)), "declared")


def executor_gpus(
    node: str,
    declared: Iterable[DeclaredGpus | tuple[str, str, int]],
    given: Iterable[LocalGpu] | None,
) -> Discovery:
    """The local executor's GPUs: `given` (tests) or discovered; one index once per node,
    logged for the service's start-up lines."""
    found = discover_gpus(node, declared) if given is None else Discovery(tuple(given), "given")
    seen: set[tuple[str, int]] = set()
    for g in found.gpus:
        if (g.node, g.index) in seen:
            raise ValueError(f"GPU index {g.index} appears twice on node {g.node}")
        seen.add((g.node, g.index))
    log.info(
        "local executor: %d GPUs from %s: %s",
        len(found.gpus),
        found.source,
        ", ".join(f"{g.node}:{g.index}={g.gpu_type}" for g in found.gpus) or "none",
    )
    return found
