"""The operational watch-list (SPEC §10): failed reservations, hold, multi-GPU burden.

The definitions live here once. The simulator (`sim.report`) and the service
(`store.watch_records` -> GET /v1/stats/watch, `jpushare stats`) turn their own history into the
same plain records and call the same functions, so both shells report the same figures for
the same history. No I/O and no clock: records in, figures out.

Definitions (all over the records passed in, i.e. over the caller's window):

- **failed reservations**: reservations released by R3, R5 or cancel ÷ reservations
  started (overall and per lab of the job that held them); the counts released by swap and
  by filling, and those still held, are reported beside it;
- **hold**: seconds from a reservation's start to its release (released ones only):
  mean, p95 (linear interpolation, numpy's default), max;
- **reservation share**: reservation cost ÷ everything charged, over ended jobs;
- **multi-GPU burden** per job size (GPUs asked for): charged TFLOP-s ÷ run TFLOP-s over
  the class's ended jobs (1.0 = no burden; the excess is reservation cost), and the mean
  wait (submission to first start) of those of them that ever started;
- **LLM backfill split** (issue 22, `backfill_split`): GPU-hours reserved in the window
  (each reservation's GPUs × its time held inside it), and what the backfill keeper
  measured: GPU-hours it served on reserved GPUs and on idle ones, GPU-hours idle with
  nothing running, and its yields (research dispatch -> GPUs free: count, mean, max). The
  keeper's totals run since its own start (`keeper_since`), not over the window. In the
  simulator a keeper serves every GPU no research job runs on: reserved GPU-hours are
  backfill GPU-hours, and nothing of an open node is idle unserved.
- **lending** (`reserved_gpus: lend-by-limit`, `lending_figures`): loans (runs started on
  reserved GPUs) and their GPU-hours (ended loans); the top job's waits for lent GPUs: from
  the moment its reservation held all its other GPUs to the end of its last loan (count,
  total, mean, max; ended waits only).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jpushare.vocabulary import JobId, ReleaseReason

# SPEC §10: the releases that mean the reservation did not lead to its job's start.
FAILED_REASONS = (ReleaseReason.R3, ReleaseReason.R5, ReleaseReason.CANCEL)


@dataclass(frozen=True, slots=True)
class ReservationSpan:
    """One reservation from its start to its release (`ended_at`/`reason` None: held)."""

    job_id: JobId
    lab: str
    tier: str
    gpus: int  # its size when it ended (or now, while held)
    started_at: float  # seconds on the caller's clock
    ended_at: float | None = None
    reason: ReleaseReason | None = None
    # (time, GPUs held from then) from its start, when its size changed (absorptions);
    # empty: `gpus` throughout
    steps: tuple[tuple[float, int], ...] = ()

    def gpu_s(self, start: float, end: float) -> float:
        """GPU-seconds it held inside [start, end] (still held: until `end`)."""
        stop = min(end if self.ended_at is None else self.ended_at, end)
        steps = self.steps or ((self.started_at, self.gpus),)
        total = 0.0
        for (t, n), nxt in zip(steps, (*steps[1:], None), strict=True):
            lo = max(t, start)
            hi = stop if nxt is None else min(nxt[0], stop)
            if hi > lo:
                total += n * (hi - lo)
        return total

    @property
    def hold_s(self) -> float | None:
        return None if self.ended_at is None else max(0.0, self.ended_at - self.started_at)


@dataclass(frozen=True, slots=True)
class EndedJob:
    """A job that reached COMPLETED, FAILED or CANCELLED, with what it cost (TFLOP-s)."""

    job_id: JobId
    lab: str
    num_gpus: int
    wait_s: float | None  # submission to first start; None if it never started
    run_cost: float
    reservation_cost: float
    charged: float  # what reached its lab (run + reservation once it has ended)


@dataclass(frozen=True, slots=True)
class ReservationCounts:
    """Reservations started, how they ended, and the failed ones (SPEC §10)."""

    started: int
    released: Mapping[str, int]  # every ReleaseReason value -> count
    held: int  # started and not released (yet)
    failed: int  # released by r3, r5 or cancel
    failed_rate: float | None  # failed / started; None without reservations

    def as_dict(self) -> dict[str, Any]:
        return {
            "started": self.started,
            "released": dict(self.released),
            "held": self.held,
            "failed": self.failed,
            "failed_rate": _ratio(self.failed_rate),
        }


@dataclass(frozen=True, slots=True)
class HoldFigures:
    """How long released reservations were held, in seconds."""

    count: int
    mean_s: float | None
    p95_s: float | None
    max_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "mean": _seconds(self.mean_s),
            "p95": _seconds(self.p95_s),
            "max": _seconds(self.max_s),
        }


@dataclass(frozen=True, slots=True)
class SizeClass:
    """The ended jobs that asked for `num_gpus` GPUs: what they ran, paid and waited."""

    num_gpus: int
    jobs: int
    run_tflop_s: float
    reservation_tflop_s: float
    charged_tflop_s: float
    burden: float | None  # charged / run; None when nothing ran
    started: int  # jobs with a wait (they ran at least once)
    mean_wait_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "run_tflop_s": round(self.run_tflop_s, 3),
            "reservation_tflop_s": round(self.reservation_tflop_s, 3),
            "charged_tflop_s": round(self.charged_tflop_s, 3),
            "burden": _ratio(self.burden),
            "started": self.started,
            "mean_wait_s": _seconds(self.mean_wait_s),
        }


@dataclass(frozen=True, slots=True)
class WatchFigures:
    """The whole watch-list over one set of records."""

    reservations: ReservationCounts
    reservations_by_lab: Mapping[str, ReservationCounts]
    hold: HoldFigures
    ended_jobs: int
    charged_tflop_s: float
    reservation_tflop_s: float
    reservation_share: float | None  # reservation / charged; None when nothing was charged
    by_gpus: tuple[SizeClass, ...]  # ascending GPU count

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, rounded the same way in both shells (seconds and TFLOP-s to 3
        decimals, ratios to 6), so equal histories give equal documents."""
        return {
            "reservations": self.reservations.as_dict(),
            "reservations_by_lab": {
                lab: c.as_dict() for lab, c in sorted(self.reservations_by_lab.items())
            },
            "hold_s": self.hold.as_dict(),
            "usage": {
                "ended_jobs": self.ended_jobs,
                "charged_tflop_s": round(self.charged_tflop_s, 3),
                "reservation_tflop_s": round(self.reservation_tflop_s, 3),
                "reservation_share": _ratio(self.reservation_share),
            },
            "by_gpus": {str(c.num_gpus): c.as_dict() for c in self.by_gpus},
        }


def _seconds(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _ratio(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on sorted values."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    rank = p / 100 * (n - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (rank - lo)


def reservation_counts(spans: Iterable[ReservationSpan]) -> ReservationCounts:
    released = {r.value: 0 for r in ReleaseReason}
    started = held = 0
    for s in spans:
        started += 1
        if s.reason is None:
            held += 1
        else:
            released[s.reason.value] += 1
    failed = sum(released[r.value] for r in FAILED_REASONS)
    return ReservationCounts(started, released, held, failed, failed / started if started else None)


def hold_figures(spans: Iterable[ReservationSpan]) -> HoldFigures:
    holds = sorted(h for h in (s.hold_s for s in spans if s.reason is not None) if h is not None)
    if not holds:
        return HoldFigures(0, None, None, None)
    return HoldFigures(len(holds), math.fsum(holds) / len(holds), percentile(holds, 95), holds[-1])


def size_classes(jobs: Iterable[EndedJob]) -> tuple[SizeClass, ...]:
    grouped: dict[int, list[EndedJob]] = defaultdict(list)
    for j in jobs:
        grouped[j.num_gpus].append(j)
    out = []
    for n in sorted(grouped):
        group = grouped[n]
        run = math.fsum(j.run_cost for j in group)
        charged = math.fsum(j.charged for j in group)
        waits = [j.wait_s for j in group if j.wait_s is not None]
        out.append(
            SizeClass(
                num_gpus=n,
                jobs=len(group),
                run_tflop_s=run,
                reservation_tflop_s=math.fsum(j.reservation_cost for j in group),
                charged_tflop_s=charged,
                burden=charged / run if run > 0 else None,
                started=len(waits),
                mean_wait_s=math.fsum(waits) / len(waits) if waits else None,
            )
        )
    return tuple(out)


def watch_figures(
    reservations: Iterable[ReservationSpan], ended_jobs: Iterable[EndedJob]
) -> WatchFigures:
    """SPEC §10's figures over these reservations and ended jobs (see the module docstring)."""
    spans = list(reservations)
    jobs = list(ended_jobs)
    by_lab: dict[str, list[ReservationSpan]] = defaultdict(list)
    for s in spans:
        by_lab[s.lab].append(s)
    charged = math.fsum(j.charged for j in jobs)
    reserved = math.fsum(j.reservation_cost for j in jobs)
    return WatchFigures(
        reservations=reservation_counts(spans),
        reservations_by_lab={lab: reservation_counts(v) for lab, v in sorted(by_lab.items())},
        hold=hold_figures(spans),
        ended_jobs=len(jobs),
        charged_tflop_s=charged,
        reservation_tflop_s=reserved,
        reservation_share=reserved / charged if charged > 0 else None,
        by_gpus=size_classes(jobs),
    )


@dataclass(frozen=True, slots=True)
class BackfillTotals:
    """What a backfill keeper measured (its totals files, or the simulator's model)."""

    reserved_served_gpu_s: float = 0.0
    idle_served_gpu_s: float = 0.0
    idle_gpu_s: float = 0.0  # neither a research job nor backfill
    yields: int = 0
    yield_seconds_sum: float = 0.0
    yield_seconds_max: float | None = None
    since: float | None = None  # the keeper's first tick (None: no keeper ran)


@dataclass(frozen=True, slots=True)
class BackfillSplit:
    """The note's claim in numbers: how much of the reserved time backfill served."""

    reserved_gpu_s: float  # reserved in the window (SPEC §4: charged to the reserving lab)
    totals: BackfillTotals

    @property
    def served_share(self) -> float | None:
        """Backfill's reserved GPU-seconds ÷ reserved GPU-seconds (both the keeper's
        window: meaningful when the keeper ran through the watch window)."""
        if self.reserved_gpu_s <= 0:
            return None
        return min(1.0, self.totals.reserved_served_gpu_s / self.reserved_gpu_s)

    def as_dict(self) -> dict[str, Any]:
        t = self.totals
        hours = 1 / 3600
        return {
            "reserved_gpu_hours": round(self.reserved_gpu_s * hours, 6),
            "backfill_reserved_gpu_hours": round(t.reserved_served_gpu_s * hours, 6),
            "backfill_idle_gpu_hours": round(t.idle_served_gpu_s * hours, 6),
            "idle_gpu_hours": round(t.idle_gpu_s * hours, 6),
            "served_share_of_reserved": _ratio(self.served_share),
            "yields": t.yields,
            "yield_mean_s": _seconds(t.yield_seconds_sum / t.yields if t.yields else None),
            "yield_max_s": _seconds(t.yield_seconds_max if t.yields else None),
            "keeper_since": t.since,
        }


def reserved_gpu_s(spans: Iterable[ReservationSpan], start: float, end: float) -> float:
    """GPU-seconds the reservations held inside [start, end] (a held one: until `end`)."""
    return math.fsum(s.gpu_s(start, end) for s in spans)


def backfill_split(
    spans: Iterable[ReservationSpan], start: float, end: float, totals: BackfillTotals
) -> BackfillSplit:
    """The split over [start, end] (see the module docstring)."""
    return BackfillSplit(reserved_gpu_s(spans, start, end), totals)


@dataclass(frozen=True, slots=True)
class WatchBucket:
    """The reservations that started in [start, start + width): for a plot over time."""

    start: float
    width: float
    counts: ReservationCounts
    hold: HoldFigures


def watch_over_time(
    reservations: Iterable[ReservationSpan], width_s: float, origin: float = 0.0
) -> list[WatchBucket]:
    """The failed-reservation rate and hold per time bucket, by start time; every bucket
    from the first start to the last, empty ones included (a gap is a fact too)."""
    if not width_s > 0:
        raise ValueError(f"bucket width must be > 0, got {width_s}")
    grouped: dict[int, list[ReservationSpan]] = defaultdict(list)
    for s in reservations:
        grouped[math.floor((s.started_at - origin) / width_s)].append(s)
    if not grouped:
        return []
    return [
        WatchBucket(
            origin + k * width_s,
            width_s,
            reservation_counts(grouped.get(k, ())),
            hold_figures(grouped.get(k, ())),
        )
        for k in range(min(grouped), max(grouped) + 1)
    ]


@dataclass(frozen=True, slots=True)
class LentRun:
    """One run on GPUs lent from `lent_from`'s reservation (`ended_at` None: still running)."""

    job_id: JobId
    lent_from: JobId
    gpus: int
    started_at: float
    ended_at: float | None = None


@dataclass(frozen=True, slots=True)
class LentWait:
    """The reserving job `job_id` held all its other GPUs from `started_at` and waited for
    its lent ones until `ended_at` (None: still waiting)."""

    job_id: JobId
    started_at: float
    ended_at: float | None = None


@dataclass(frozen=True, slots=True)
class LendingFigures:
    """What lending gave (lent GPU-hours) and what it cost the top job (its waits)."""

    loans: int
    lent_gpu_hours: float
    waits: int
    wait_total_s: float
    wait_mean_s: float | None
    wait_max_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "loans": self.loans,
            "lent_gpu_hours": round(self.lent_gpu_hours, 3),
            "top_job_waits": self.waits,
            "wait_total_s": round(self.wait_total_s, 3),
            "wait_mean_s": _seconds(self.wait_mean_s),
            "wait_max_s": _seconds(self.wait_max_s),
        }


def lending_figures(runs: Iterable[LentRun], waits: Iterable[LentWait]) -> LendingFigures:
    """The lending figures (see the module docstring) over these records."""
    loans = 0
    gpu_s: list[float] = []
    for r in runs:
        loans += 1
        if r.ended_at is not None:
            gpu_s.append(r.gpus * max(0.0, r.ended_at - r.started_at))
    spans = [max(0.0, w.ended_at - w.started_at) for w in waits if w.ended_at is not None]
    total = math.fsum(spans)
    return LendingFigures(
        loans=loans,
        lent_gpu_hours=math.fsum(gpu_s) / 3600.0,
        waits=len(spans),
        wait_total_s=total,
        wait_mean_s=total / len(spans) if spans else None,
        wait_max_s=max(spans) if spans else None,
    )
