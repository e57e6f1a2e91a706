"""The policy's vocabulary: snapshot in (tiers, placements, queue, now), decisions out.

No I/O and no clock here: every value is passed in. Times are seconds (float) on one clock
chosen by the caller (the simulator's clock, or UNIX time in the service). Usage and costs
are TFLOP-seconds (GPU count x seconds x tier TFLOPS).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from jpushare.vocabulary import JobId
from jpushare.vocabulary import ReleaseReason as ReleaseReason  # the shared words, named here
from jpushare.vocabulary import WhyCode as WhyCode


@dataclass(frozen=True, slots=True)
class Tier:
    """A GPU model class (SPEC §1, `gpu_tiers`)."""

    name: str
    tflops: float
    sort_order: int  # higher = stronger
    max_gpus: int = 8  # the most GPUs one job may take on this tier
    auto_assign: bool = True  # the dispatcher may place jobs here
    partition: str | None = None  # the Slurm partition of the tier


@dataclass(frozen=True, slots=True)
class Placement:
    """All GPUs of one node and one tier (SPEC §1): key `(node, tier)`.

    `capacity` is the number of GPUs in the inventory (static: it decides *fit*).
    `busy` is how many of them research jobs use right now in Slurm's view, JPU-Share's
    and foreign ones alike (LLM backfill does not count: it yields on demand).
    `schedulable` is False when the node is down or drained: then it has no idle GPU and
    can hold no reservation (R5), but keeps its capacity.
    """

    node: str
    tier: str
    capacity: int
    busy: int = 0
    schedulable: bool = True

    @property
    def key(self) -> tuple[str, str]:
        return (self.node, self.tier)

    @property
    def free(self) -> int:
        """GPUs no research job uses (reservations not yet subtracted)."""
        if not self.schedulable:
            return 0
        return max(0, self.capacity - self.busy)


@dataclass(frozen=True, slots=True)
class Reservation:
    """The GPUs a queued job holds on one placement while it waits for the rest (R1)."""

    node: str
    tier: str
    gpus: int
    since: float  # when the reservation started
    last_accrued_at: float  # its cost is accrued into the job up to here (SPEC §4)


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A job in GLOBAL_QUEUE_WAIT."""

    job_id: JobId
    lab: str
    num_gpus: int
    min_sort_order: int  # minimum_tier_sort_order: fit needs tier.sort_order >= this
    queue_entered_at: float
    reservation: Reservation | None = None
    time_limit_s: float | None = None  # user's runtime estimate (used by `backfill` only)


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job that holds GPUs now. Only the `backfill` peer policy reads these."""

    job_id: JobId
    node: str
    tier: str
    num_gpus: int
    started_at: float
    time_limit_s: float | None = None
    lent_from: JobId | None = None  # runs on GPUs this job's reservation holds (lending)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one dispatch cycle may look at; it does not change while the cycle decides."""

    tiers: tuple[Tier, ...]
    placements: tuple[Placement, ...]
    queue: tuple[QueuedJob, ...]  # any order: the policy sorts it
    lab_usage: dict[str, float]  # lab -> cumulative usage, TFLOP-seconds; missing = 0
    now: float
    running: tuple[RunningJob, ...] = ()


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Start `job_id` on `num_gpus` GPUs of placement (node, tier). `lent_from` names the
    job whose reserved GPUs it borrows (`reserved_gpus: lend-by-limit`), until `lent_until`
    (its time limit's end, no later than that reservation's projected fill)."""

    job_id: JobId
    node: str
    tier: str
    num_gpus: int
    lent_from: JobId | None = None
    lent_until: float | None = None


@dataclass(frozen=True, slots=True)
class StartReservation:
    job_id: JobId
    node: str
    tier: str
    gpus: int


@dataclass(frozen=True, slots=True)
class AbsorbReservation:
    """The reservation grows by `added` idle GPUs of its own placement, to `total`."""

    job_id: JobId
    node: str
    tier: str
    added: int
    total: int


@dataclass(frozen=True, slots=True)
class ReleaseReservation:
    job_id: JobId
    node: str
    tier: str
    gpus: int
    reason: ReleaseReason


@dataclass(frozen=True, slots=True)
class AccrueReservation:
    """Reservation cost since `last_accrued_at`, into the job (not the lab): SPEC §4."""

    job_id: JobId
    tflop_s: float
    accrued_to: float


Action = Dispatch | StartReservation | AbsorbReservation | ReleaseReservation


@dataclass(frozen=True, slots=True)
class Why:
    """One queued job's answer, as data; `sentence` renders it for a person."""

    job_id: JobId
    code: WhyCode
    rank: int  # 0 = top job
    queue_length: int
    top_job_id: JobId
    num_gpus: int
    fit_placements: int  # how many placements fit the job (static)
    schedulable_fit_placements: int
    best_idle: int  # the most idle GPUs on one fit placement when the cycle reached the job
    reservation: Reservation | None = None  # the job's own
    blocking_job_id: JobId | None = None  # whose reservation holds GPUs it could use
    blocking_reservation: Reservation | None = None

    @property
    def sentence(self) -> str:
        from jpushare.policy.why import render

        return render(self)


@dataclass(frozen=True, slots=True)
class Decisions:
    """One cycle's output. `actions` is in the order the cycle took them."""

    now: float
    order: tuple[JobId, ...]  # the queue in rank order, job ids
    actions: tuple[Action, ...]
    accruals: tuple[AccrueReservation, ...] = ()
    why: Mapping[JobId, Why] = field(default_factory=dict)  # every job still queued after the cycle

    def dispatches(self) -> list[Dispatch]:
        return [a for a in self.actions if isinstance(a, Dispatch)]
