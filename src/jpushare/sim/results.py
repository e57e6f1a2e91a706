"""What a simulation returns (job results, attempts, reservations, GPU samples), apart from
the engine so that reports and the replay read results without the state machine."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from jpushare.policy.model import (
    ReleaseReason,
)
from jpushare.policy.order import (
    PlacementOrder,
)
from jpushare.policy.watch import LentRun as LentRun  # the watch-list's records, named here
from jpushare.policy.watch import LentWait as LentWait
from jpushare.vocabulary import JobId


class TraceJobState(StrEnum):
    """A trace job's state. The last four are final; QUEUED at the end means it never could
    start again (e.g. its only fit node stayed down)."""

    PENDING = "PENDING"  # not submitted yet
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    REJECTED = "REJECTED"


class AttemptEnd(StrEnum):
    """How one attempt (one dispatch) ended."""

    COMPLETED = "completed"
    OOM = "oom"  # out of memory: SPEC §5 escalation
    NODE_DOWN = "node_down"  # back to the queue, no escalation
    CANCELLED = "cancelled"
    TIME_LIMIT = "time_limit"  # a run on lent GPUs stopped at its limit (lending only)


@dataclass(frozen=True, slots=True)
class Attempt:
    start: float
    end: float
    node: str
    tier: str
    num_gpus: int
    outcome: AttemptEnd
    run_cost: float  # TFLOP-seconds


@dataclass(frozen=True, slots=True)
class TraceJobResult:
    """One trace job after the replay."""

    job_id: JobId
    lab: str
    num_gpus: int
    state: TraceJobState
    submit_time: float
    attempts: tuple[Attempt, ...]
    run_cost: float  # TFLOP-seconds, every attempt
    reservation_cost: float  # TFLOP-seconds, every reservation it held
    billed: float  # what reached its lab's usage
    reason: str = ""  # why REJECTED or FAILED

    @property
    def first_start(self) -> float | None:
        return self.attempts[0].start if self.attempts else None

    @property
    def wait_s(self) -> float | None:
        """First start minus submission (None if it never started)."""
        return None if not self.attempts else self.attempts[0].start - self.submit_time

    @property
    def last(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None


@dataclass(frozen=True, slots=True)
class ReservationRecord:
    """One reservation from start to release (`ended_at`/`reason` None: still held)."""

    job_id: JobId
    node: str
    tier: str
    gpus: int  # size when it ended
    since: float
    ended_at: float | None
    reason: ReleaseReason | None

    @property
    def hold_s(self) -> float | None:
        return None if self.ended_at is None else self.ended_at - self.since


@dataclass(frozen=True, slots=True)
class GpuSample:
    """GPU use from `t` until the next sample."""

    t: float
    running: int
    reserved: int
    up: int  # capacity of the placements that are schedulable


@dataclass(frozen=True)
class SimResult:
    policy: str
    cycle_s: float
    jobs: tuple[TraceJobResult, ...]  # trace order
    reservations: tuple[ReservationRecord, ...]  # in start order
    initial_lab_usage: dict[str, float]
    lab_usage: dict[str, float]  # final
    capacity_gpus: int  # the inventory's GPUs (down nodes included)
    running_gpu_s: float
    reserved_gpu_s: float
    gpu_timeline: tuple[GpuSample, ...]
    lab_timeline: tuple[tuple[float, str, float], ...]  # (t, lab, usage after a bill)
    cycles_run: int
    cycles_total: int  # cycle times passed, run or skipped
    wall_s: float = field(compare=False, default=0.0)
    placement: str = PlacementOrder.PACK.value  # the dispatch order (SPEC §1)
    reserved_gpus: str = "llm-only"  # R4, or "lend-by-limit" (the lending option)
    lent_runs: tuple[LentRun, ...] = ()  # every run on lent GPUs, in start order
    lent_waits: tuple[LentWait, ...] = ()  # the reserving jobs' waits for lent GPUs
    lent_gpu_s: float = 0.0  # GPU-seconds run on lent GPUs (inside running_gpu_s)

    @property
    def label(self) -> str:
        """What reports call this run: "<policy>/<placement>", e.g. "reservation/pack"."""
        return f"{self.policy}/{self.placement}"
