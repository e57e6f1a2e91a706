"""GET /v1/backfill: where the LLM traffic goes, for a lab's router or load balancer.

The servers the backfill keeper runs now (`executors.backfill_servers`, read from the local
executor's state directory at each request): node, tier, GPU indices, URL, since. A server
the executor was told to stop is not listed from that moment, so a proxy that regenerates
its upstream list from this answer stops sending it requests before the server exits.
Beside them, the figures of issue 22 / SPEC §6: yields (count, GPUs, latency) and the
GPU-hours served on reserved and idle GPUs, and idle with nothing running.

On Slurm the servers are Slurm jobs of the backfill partition that research jobs preempt
(`backfill.slurm_keeper`): the keeper writes the same records and totals, under the Slurm
executor's log directory (`<log dir>/backfill/`), for its running jobs, each with the GPUs
Slurm gave it and `http://<node>:<port>`; `source` is "slurm". Their yields are Slurm's
preemptions: a research job's sbatch -> start, in Slurm's whole seconds.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from fastapi import APIRouter
from pydantic import BaseModel

from jpushare.api.deps import ContextDep, CurrentUser
from jpushare.api.schemas.common import error_responses
from jpushare.executors.backfill_servers import (
    RUNNING,
    backfill_dir,
    load_all,
    read_usage,
    read_yield_stats,
)
from jpushare.metrics import BackfillFigures
from jpushare.policy.watch import BackfillTotals

router = APIRouter(prefix="/v1", tags=["cluster"])

_ERRORS = error_responses({401: "UNAUTHENTICATED"})


class BackfillServerPublic(BaseModel):
    key: str
    node: str
    tier: str
    gpus: list[int]
    url: str  # OpenAI-compatible: {url}/v1/models, {url}/v1/chat/completions
    since: datetime | None


class BackfillYieldsPublic(BaseModel):
    """Yields so far: research dispatches that stopped backfill servers first."""

    count: int
    gpus: int
    mean_seconds: float | None  # dispatch -> the GPUs free (the job starts)
    max_seconds: float | None
    killed_after_grace: int


class BackfillUsagePublic(BaseModel):
    """GPU-hours since `since` (the keeper's first tick)."""

    backfill_reserved_gpu_hours: float
    backfill_idle_gpu_hours: float
    idle_gpu_hours: float  # no research job and no backfill server
    since: datetime | None


class BackfillPublic(BaseModel):
    source: str  # "local" | "slurm" (the keeper's servers) | "none" (no keeper directory)
    data: list[BackfillServerPublic]
    count: int
    yields: BackfillYieldsPublic
    usage: BackfillUsagePublic


def _at(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, UTC)


def backfill_public(directory: Path | None, source: str = "local") -> BackfillPublic:
    """The answer for a keeper's directory (None: no executor with one)."""
    servers = [] if directory is None else load_all(directory)
    data = [
        BackfillServerPublic(
            key=r.key,
            node=r.node,
            tier=r.gpu_type,
            gpus=sorted(r.gpu_indices),
            url=r.url,
            since=_at(r.started_at),
        )
        for r in servers
        if r.state == RUNNING and r.started_at is not None
    ]
    stats = read_yield_stats(directory)
    n = int(stats["count"])
    usage = read_usage(directory)
    return BackfillPublic(
        source="none" if directory is None else source,
        data=data,
        count=len(data),
        yields=BackfillYieldsPublic(
            count=n,
            gpus=int(stats["gpus"]),
            mean_seconds=stats["seconds_sum"] / n if n else None,
            max_seconds=stats["seconds_max"] if n else None,
            killed_after_grace=int(stats["killed"]),
        ),
        usage=BackfillUsagePublic(
            backfill_reserved_gpu_hours=usage.backfill_reserved_gpu_s / 3600,
            backfill_idle_gpu_hours=usage.backfill_idle_gpu_s / 3600,
            idle_gpu_hours=usage.idle_gpu_s / 3600,
            since=_at(usage.since),
        ),
    )


def keeper_dir_of(executor: object) -> Path | None:
    """The backfill directory of a local executor (its state directory's) or of a Slurm
    executor with a backfill partition (its log directory's); None: another, or none."""
    state_dir = getattr(executor, "state_dir", None)
    if isinstance(state_dir, Path):
        return backfill_dir(state_dir)
    log_dir = getattr(executor, "log_dir", None)
    if isinstance(log_dir, Path) and getattr(executor, "backfill", None) is not None:
        return log_dir / "backfill"
    return None


def keeper_source(executor: object) -> str:
    return "local" if isinstance(getattr(executor, "state_dir", None), Path) else "slurm"


def serving_by_placement(executor: object) -> dict[tuple[str, str], int]:
    """(node, tier) -> GPUs the keeper's running servers hold now (its records)."""
    directory = keeper_dir_of(executor)
    out: dict[tuple[str, str], int] = {}
    if directory is None:
        return out
    for r in load_all(directory):
        if r.state == RUNNING:
            key = (r.node, r.gpu_type)
            out[key] = out.get(key, 0) + max(len(r.gpu_indices), 1)
    return out


def keeper_dir(ctx: ContextDep) -> Path | None:
    return keeper_dir_of(ctx.executor)


def keeper_totals(directory: Path | None) -> BackfillTotals:
    """The keeper's totals as the watch-list's record (zeros, since None: no keeper)."""
    if directory is None:
        return BackfillTotals()
    stats = read_yield_stats(directory)
    usage = read_usage(directory)
    return BackfillTotals(
        reserved_served_gpu_s=usage.backfill_reserved_gpu_s,
        idle_served_gpu_s=usage.backfill_idle_gpu_s,
        idle_gpu_s=usage.idle_gpu_s,
        yields=int(stats["count"]),
        yield_seconds_sum=stats["seconds_sum"],
        yield_seconds_max=stats["seconds_max"],
        since=usage.since,
    )


def backfill_figures(directory: Path) -> BackfillFigures:
    """What /metrics exports about backfill (`metrics.BackfillCollector`)."""
    stats = read_yield_stats(directory)
    usage = read_usage(directory)
    return BackfillFigures(
        servers=sum(1 for r in load_all(directory) if r.state == RUNNING),
        reserved_gpu_s=usage.backfill_reserved_gpu_s,
        idle_served_gpu_s=usage.backfill_idle_gpu_s,
        idle_gpu_s=usage.idle_gpu_s,
        yields=int(stats["count"]),
        yield_seconds_sum=stats["seconds_sum"],
        yield_seconds_max=stats["seconds_max"],
        killed=int(stats["killed"]),
    )


@router.get("/backfill", responses=_ERRORS)
def backfill(user: CurrentUser, ctx: ContextDep) -> BackfillPublic:
    """The LLM backfill servers running now (node, tier, GPUs, URL, since), the yields so
    far and the GPU-hours backfill served on reserved and on idle GPUs. A server being
    stopped for a research job is no longer listed."""
    return backfill_public(keeper_dir(ctx), keeper_source(ctx.executor))
