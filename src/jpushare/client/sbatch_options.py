"""sbatch's ways of asking for GPUs, read as one request: `--gpus/-G [TYPE:]N`,
`--gres gpu[:TYPE]:N`, `--gpus-per-node [TYPE:]N` (one node is all a job gets), a TYPE
being a tier (the weakest it may run on, as `--min-tier`), and `-p/--partition`, which is
honoured where the partition's tiers are exactly "this tier and every stronger one".
Pure: arguments and the API's tiers in, a count and a minimum tier (or a UsageError
sentence) out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jpushare.client.arguments import GpuAsk


class GpuRequestError(ValueError):
    """The GPU options disagree or ask for what cannot be had; the message says which."""


def gpu_request(asks: Mapping[str, GpuAsk | None], min_tier: str | None) -> tuple[int, str | None]:
    """(num_gpus, min_tier) from the options given (`asks`: option name -> its value or
    None), which must agree with each other and with `--min-tier`."""
    given = {name: ask for name, ask in asks.items() if ask is not None}
    if not given:
        raise GpuRequestError(
            "submit needs a number of GPUs: --gpus N (or sbatch's -G N, --gres gpu:N, "
            "--gpus-per-node N, in the script or on the command line)"
        )
    counts = {ask[1] for ask in given.values()}
    if len(counts) > 1:
        said = ", ".join(f"{name} {_ask_text(ask)}" for name, ask in given.items())
        raise GpuRequestError(f"the GPU options disagree: {said}")
    tiers = {ask[0] for ask in given.values() if ask[0]} | ({min_tier} if min_tier else set())
    if len(tiers) > 1:
        raise GpuRequestError(f"the GPU types disagree: {', '.join(sorted(tiers))}")
    return counts.pop(), (tiers.pop() if tiers else None)


def _ask_text(ask: GpuAsk) -> str:
    return f"{ask[0]}:{ask[1]}" if ask[0] else str(ask[1])


def partition_min_tier(partition: str, tiers: Sequence[Mapping[str, Any]]) -> str:
    """The minimum tier that selects exactly the tiers of `partition` among those the
    scheduler assigns (`auto_assign`); GpuRequestError when no tier is in it, or when its
    tiers are not "one tier and every stronger one" (a minimum tier cannot say that)."""
    usable = sorted((t for t in tiers if t.get("auto_assign", True)), key=lambda t: t["sort_order"])
    names = {p.strip() for p in partition.split(",") if p.strip()}  # sbatch: -p a,b
    inside = [t for t in usable if t.get("partition") in names]
    if not inside:
        known = sorted({str(t["partition"]) for t in usable if t.get("partition")})
        listed = f" (partitions: {', '.join(known)})" if known else ""
        raise GpuRequestError(f"no GPU tier is in partition {partition!r}{listed}")
    weakest = inside[0]
    from_it = [t for t in usable if t["sort_order"] >= weakest["sort_order"]]
    if [t["name"] for t in from_it] != [t["name"] for t in inside]:
        others = ", ".join(t["name"] for t in from_it if t not in inside)
        raise GpuRequestError(
            f"partition {partition!r} is not a minimum tier: a job there could also run on "
            f"{others}; use --min-tier"
        )
    return str(weakest["name"])
