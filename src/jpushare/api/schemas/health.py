"""The service's health and the watch figures (GET /v1/health, GET /v1/watch)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class DispatcherHealthPublic(BaseModel):
    """The dispatcher as the database records it (every API process reads the same)."""

    state: Literal["ok", "stale", "none"] = Field(
        description="stale: no cycle succeeded for `stale_after_s`; none: never ran"
    )
    last_success_at: datetime | None
    holder: str | None = Field(description="the process holding the dispatcher lease")
    stale_after_s: float


class HealthPublic(BaseModel):
    """200 with `status` ok or degraded (the API works; the dispatcher may not: `reason`
    says why); 503 when the database cannot be reached (this process cannot serve)."""

    status: Literal["ok", "degraded"]
    database: Literal["ok", "unreachable"]
    time: datetime
    reason: str | None = Field(default=None, description="why degraded, for people")
    dispatcher: DispatcherHealthPublic | None = Field(
        default=None, description="null when the database could not be read"
    )


class ReservationCountsPublic(BaseModel):
    started: int
    released: dict[str, int] = Field(description="reason (filled, swap, r3, r5, cancel) -> count")
    held: int = Field(description="started in the window and not released by its end")
    failed: int = Field(description="released by r3, r5 or cancel")
    failed_rate: float | None = Field(description="failed / started; null without reservations")


class HoldPublic(BaseModel):
    """Seconds from start to release, over the released reservations."""

    count: int
    mean: float | None
    p95: float | None
    max: float | None


class WatchUsagePublic(BaseModel):
    ended_jobs: int
    charged_tflop_s: float
    reservation_tflop_s: float
    reservation_share: float | None = Field(description="reservation / charged")


class WatchBackfillPublic(BaseModel):
    """LLM backfill (issue 22): GPU-hours reserved in the window, and what the backfill
    keeper measured since `keeper_since` (its first tick; null: no keeper ran here)."""

    reserved_gpu_hours: float
    backfill_reserved_gpu_hours: float
    backfill_idle_gpu_hours: float
    idle_gpu_hours: float = Field(description="no research job and no backfill server")
    served_share_of_reserved: float | None = Field(
        description="backfill on reserved GPUs / reserved GPU-hours (capped at 1)"
    )
    yields: int
    yield_mean_s: float | None = Field(description="research dispatch -> its GPUs free")
    yield_max_s: float | None
    keeper_since: float | None = Field(description="UNIX seconds")


class SizeClassPublic(BaseModel):
    """The ended jobs of one size (GPUs asked for)."""

    jobs: int
    run_tflop_s: float
    reservation_tflop_s: float
    charged_tflop_s: float
    burden: float | None = Field(description="charged / run: 1.0 = no reservation cost")
    started: int = Field(description="jobs that ever started")
    mean_wait_s: float | None = Field(description="submission to first dispatch")


class WatchPublic(BaseModel):
    """SPEC §10 over [since, until]: reservations that started and jobs that ended in it."""

    since: datetime
    until: datetime
    reservations: ReservationCountsPublic
    reservations_by_lab: dict[str, ReservationCountsPublic]
    hold_s: HoldPublic
    usage: WatchUsagePublic
    by_gpus: dict[str, SizeClassPublic] = Field(description="keyed by GPU count")
    backfill: WatchBackfillPublic | None = None
