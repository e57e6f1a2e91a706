"""What the repository returns: frozen plain values, never live ORM objects.

A record stays valid after its session closes, so API handlers and the dispatcher can use
it freely without lazy loads or accidental writes. Times are aware UTC datetimes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jpushare.policy.model import Action
from jpushare.store.schema import EventKind
from jpushare.vocabulary import JobId, JobState, NodeState, ReleaseReason, job_id


@dataclass(frozen=True, slots=True)
class LabRecord:
    id: int
    name: str
    cumulative_usage: float  # TFLOP-seconds
    created_at: datetime


@dataclass(frozen=True, slots=True)
class UserRecord:
    id: int
    name: str
    lab_id: int
    lab_name: str
    role: str  # Role value
    created_at: datetime
    unix_user: str  # the account its jobs run as and MUNGE credentials map to


@dataclass(frozen=True, slots=True)
class TokenRecord:
    id: int
    user_id: int
    label: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A new token: `secret` is shown once and never stored (only its SHA-256 is)."""

    token: TokenRecord
    secret: str


@dataclass(frozen=True, slots=True)
class TierRecord:
    id: uuid.UUID
    name: str
    tflops: float
    sort_order: int
    max_gpus: int
    auto_assign: bool
    partition: str | None
    cpus_per_gpu: int | None = None  # default for its jobs (sbatch --cpus-per-gpu)
    mem_per_gpu_mb: int | None = None


@dataclass(frozen=True, slots=True)
class NodeRecord:
    name: str
    state: NodeState  # observed
    state_reason: str | None
    admin_drained: bool
    drain_reason: str | None
    observed_at: datetime | None
    updated_at: datetime
    gpus: dict[str, int]  # tier name -> GPUs in the inventory (schedulable ones)

    @property
    def schedulable(self) -> bool:
        return self.state is NodeState.UP and not self.admin_drained


@dataclass(frozen=True, slots=True)
class JobRecord:
    id: int
    name: str
    command: str
    user_id: int
    user_name: str
    lab_id: int
    lab_name: str
    num_gpus: int
    minimum_tier_sort_order: int
    time_limit_s: float | None
    state: JobState
    submitted_at: datetime
    queue_entered_at: datetime
    dispatched_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    node_name: str | None
    tier_name: str | None
    executor_id: str | None
    attempts: int
    exit_code: int | None
    reason: str | None
    run_cost: float  # TFLOP-seconds, every attempt's run
    # TFLOP-seconds, every reservation it held: the column SPEC §7 names reservation_gpu_seconds
    reservation_cost_tflop_s: float
    charged_tflop_s: float  # how much of the bill has reached the lab
    reserved_gpus: int
    reserved_node_name: str | None
    reserved_tier_name: str | None
    reservation_since: datetime | None
    reservation_last_accrued_at: datetime | None
    # Where and with what it runs (None on jobs from before revision 0003).
    workdir: str | None = None
    environment: dict[str, str] | None = None
    output_path: str | None = None
    error_path: str | None = None
    cpus_per_gpu: int | None = None
    mem_per_gpu_mb: int | None = None
    # Eligibility (revision 0007, `ledger.eligibility`): None `waiting` is in the queue.
    waiting: str | None = None
    held: bool = False
    dependency: str | None = None
    kill_on_invalid_dep: bool = False
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_limit: int | None = None

    # Lending (revision 0009): the current (or last) attempt runs on GPUs lent from this
    # job's reservation, until the end of its own time limit.
    lent_from_job_id: int | None = None
    lent_until: datetime | None = None

    @property
    def display_id(self) -> str:
        """The id people type: `ARRAY_TASK` for an array's task (as Slurm), else the id."""
        if self.array_job_id is not None and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.id)

    @property
    def policy_id(self) -> JobId:
        """The id the policy knows this job by."""
        return job_id(self.id)

    @property
    def bill(self) -> float:
        """Everything this job has cost so far, TFLOP-seconds (SPEC §4)."""
        return self.run_cost + self.reservation_cost_tflop_s


@dataclass(frozen=True, slots=True)
class JobEventRecord:
    id: int
    job_id: int
    at: datetime
    kind: EventKind
    from_state: JobState | None
    to_state: JobState | None
    detail: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class DispatchedJob:
    """A dispatch that `record_decisions` applied: what the dispatcher now starts."""

    job_id: int
    attempt: int
    name: str
    command: str
    user_name: str
    node: str
    tier: str
    partition: str | None
    num_gpus: int
    time_limit_s: float | None
    # The owner's account and how the job runs; CPUs/memory per GPU are the job's own or
    # else its tier's default (None: no limit). workdir None: a job from before 0003.
    unix_user: str | None = None
    workdir: str | None = None
    environment: dict[str, str] | None = None
    output_path: str | None = None
    error_path: str | None = None
    cpus_per_gpu: int | None = None
    mem_per_gpu_mb: int | None = None


@dataclass(frozen=True, slots=True)
class Recorded:
    """What `record_decisions` did, each list in the decisions' order. Skipped actions were
    stale: the job was no longer where the decision expected it."""

    dispatched: tuple[DispatchedJob, ...]
    applied: tuple[Action, ...]
    skipped: tuple[Action, ...]
    accrued_tflop_s: float  # reservation cost added to jobs this cycle


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    """What a lifecycle transition that ends an attempt did."""

    job: JobRecord
    charged_tflop_s: float  # added to the lab by this transition
    requeued: bool = False
    released: ReleaseReason | None = None  # the reservation it held, if any


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What `sync_inventory` changed."""

    nodes: tuple[str, ...]  # nodes whose GPUs were synced
    added: int  # GPU rows added
    removed: int  # GPU rows removed
    unknown_gpu_types: tuple[tuple[str, str], ...]  # (node, gpu_type) with no tier of that name
    marked_down: tuple[str, ...] = ()  # nodes missing from the observation (if asked)


@dataclass(frozen=True, slots=True)
class Cancelled:
    """What `cancel_job` did. If `stop_run` is set, the caller must stop that run."""

    job: JobRecord
    previous_state: JobState
    charged_tflop_s: float
    released: ReleaseReason | None  # CANCEL if it held a reservation (S11)
    stop_attempt: int | None  # the attempt the executor may be running (DISPATCHED/RUNNING)
    stop_executor_id: str | None  # its executor id if known (None: find it by job id, attempt)
    # The charge counts the run up to the cancel: final once the executor reports when the
    # run really ended (`settle_cancelled_run`), which may add or take back a little.
    provisional: bool = False
