"""Why a job waits and where it would start: the why answer, the queue and the placements
view."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from jpushare.api.schemas.jobs import ReservationPublic
from jpushare.vocabulary import AnswerCode, JobState, ReleaseReason


class PlacementReservation(BaseModel):
    job_id: int
    gpus: int
    of: int
    since: datetime | None


class PlacementLoan(BaseModel):
    """A run on GPUs lent from a reservation here (`reserved_gpus: lend-by-limit`): they
    count as busy, not reserved, until it ends by its time limit (`until`) at the latest."""

    job_id: int
    gpus: int
    lent_from_job_id: int
    until: datetime | None


class PlacementView(BaseModel):
    """One fit placement's numbers as recorded now (SPEC §8): the same figures, computed the
    same way, as `GET /v1/placements` shows, with the reservations held there."""

    node: str
    tier: str
    capacity: int
    busy: int
    reserved: int
    idle: int
    schedulable: bool
    reservations: list[PlacementReservation] = Field(default_factory=list)


class BlockingPublic(BaseModel):
    """The recorded reservation of the top job that holds GPUs this job could use (R4)."""

    job_id: int
    reservation: ReservationPublic


class DispatchPublic(BaseModel):
    node: str
    tier: str
    num_gpus: int


class PlannedActionPublic(BaseModel):
    """One thing the next dispatch cycle would do for a job: the policy run on what is
    recorded now, a projection and not a record. It carries no time: it happens when that
    cycle runs, if nothing changes before (a job ending, a submission, a node going down)."""

    action: Literal["start", "reserve", "absorb", "release"]
    node: str
    tier: str
    gpus: int = Field(description="GPUs it would start on, reserve, add, or release")
    reserved_after: int | None = Field(
        default=None, description="absorb: the reservation's size afterwards"
    )
    reason: ReleaseReason | None = Field(default=None, description="release: why")


class StartEstimate(BaseModel):
    """The start estimate fields that "why" and the queue share (one definition)."""

    estimated_start: datetime | None = Field(
        default=None,
        description="a projection (like squeue --start): when the policy, run forward from "
        "now, would start it; null when beyond the forecast or none could be made",
    )
    estimate_basis: str | None = Field(
        default=None,
        description="what its own run time was taken from in that forecast: time_limit, "
        "user_history or lab_history (the median completed run of its GPU count), default",
    )


class WhyPublic(StartEstimate):
    """The answer to "why isn't my job running?" (SPEC §8), with the numbers behind it.

    For a queued job, what is recorded is stated as fact: `rank` (1 for the top job), its
    `reservation`, the `blocking` reservation, the `placements` table and `best_idle` (the
    most idle GPUs on one fit placement, from that table). `next_cycle` (and `dispatch`, where
    it would start) is what the next cycle would do, a projection; the sentence says both,
    the projection as "at the next cycle …". `code` is the policy's WhyCode for the job as
    it is now (RESERVING only for a recorded reservation), or STARTING when the next cycle
    would dispatch it. For any other job `code` is its state and the sentence says what
    happened, from its history.
    """

    job_id: int
    state: JobState
    code: AnswerCode
    sentence: str
    rank: int | None = None
    queue_length: int | None = None
    top_job_id: int | None = None
    num_gpus: int
    min_tier: str | None = None
    fit_placements: int | None = None
    schedulable_fit_placements: int | None = None
    best_idle: int | None = None
    reservation: ReservationPublic | None = None
    blocking: BlockingPublic | None = None
    dispatch: DispatchPublic | None = None
    # Its run (or the one the next cycle starts) is on GPUs lent from this job's reservation
    # (`reserved_gpus: lend-by-limit`) until the end of its own time limit; else None.
    lent_from_job_id: int | None = None
    lent_until: datetime | None = None
    next_cycle: list[PlannedActionPublic] = Field(default_factory=list)
    placements: list[PlacementView] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="earlier events worth knowing")
    estimate_sentence: str | None = Field(
        default=None,
        description="the start estimate in words, a projection with what it assumes "
        '("Estimated to start around …, assuming …"); null without an estimate',
    )


class QueueEntryPublic(StartEstimate):
    rank: int
    job_id: int
    display_id: str = Field(default="", description="ARRAY_TASK for an array's task, else id")
    name: str
    user: str
    lab: str
    lab_usage_tflop_s: float
    num_gpus: int
    min_tier: str | None
    queue_entered_at: datetime
    reservation: ReservationPublic | None = Field(description="as recorded now")
    next_cycle: list[PlannedActionPublic] = Field(description="a projection, as in why")
    code: AnswerCode
    sentence: str


class QueuePublic(BaseModel):
    data: list[QueueEntryPublic]
    count: int = Field(description="entries in this page")
    queue_length: int
    top_job_id: int | None
    computed_at: datetime


class PlacementPublic(BaseModel):
    """One placement (node, tier) for people and for the LLM backfill router.

    `idle` GPUs are free for research jobs now; `reserved` ones are closed to other research
    jobs but keep serving LLM backfill (R4); `llm_backfill_gpus` = idle + reserved is what
    the router may use until it is told to yield; `llm_gpus` of them an LLM backfill server
    holds now (the keeper's servers, local or Slurm jobs of the backfill partition: "LLM" in
    `jpushare placements` and on the dashboard).
    """

    node: str
    tier: str
    tflops: float
    capacity: int
    busy: int
    reserved: int
    idle: int
    llm_backfill_gpus: int
    llm_gpus: int = 0
    schedulable: bool
    node_state: str
    node_state_reason: str | None
    drained: bool
    drain_reason: str | None
    reservations: list[PlacementReservation]
    lent: int = Field(default=0, description="busy GPUs that are lent from a reservation here")
    loans: list[PlacementLoan] = Field(default_factory=list)


class PlacementsPublic(BaseModel):
    data: list[PlacementPublic]
    count: int
    computed_at: datetime
