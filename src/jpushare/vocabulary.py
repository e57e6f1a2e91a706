"""The words every layer shares: job and node states, release reasons, "why" codes, job ids.

A leaf module: it imports nothing of the project, so the policy, the store, the API, the
executors and the simulator can all use it without depending on each other. Every enum is
a StrEnum whose values are the text stored in the database and sent in JSON, so a member
compares equal to (and serialises as) the string it replaced.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, TypeAlias

JobId: TypeAlias = str
"""A job as the policy, the simulator and the executors know it: text (a trace's or a
test's names, or the store's integer written out). The store keeps integers (what people
type: `jpushare why 42`) and converts at its boundary with `job_id` / `store_job_id`, the
only casts. The policy compares ids as text only to break ties between jobs of one lab
that entered the queue in the same microsecond, where any fixed order is fair. (An alias,
not a NewType: policy tests index decisions by literal names such as "jobA".)"""


def job_id(store_id: int) -> JobId:
    """The id the policy knows the store's job `store_id` by."""
    return str(store_id)


def store_job_id(job: JobId) -> int:
    """The store's integer id of a job the policy names (ValueError if it is not one)."""
    return int(job)


class JobState(StrEnum):
    """A job's state in the service (SPEC §5)."""

    GLOBAL_QUEUE_WAIT = "GLOBAL_QUEUE_WAIT"
    DISPATCHED = "DISPATCHED"  # recorded and handed to the executor, not started yet
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def ended(self) -> bool:
        return self in ENDED_STATES

    @property
    def active(self) -> bool:
        """Handed to the executor and not ended: it holds (or is about to hold) GPUs."""
        return self in ACTIVE_STATES


ENDED_STATES = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)
ACTIVE_STATES = (JobState.DISPATCHED, JobState.RUNNING)


class NodeState(StrEnum):
    """A node's observed state as the policy needs it (Slurm's words), stored as text."""

    UP = "up"  # idle, mixed, allocated: schedulable
    DOWN = "down"  # down, not responding, fail: not schedulable (R5)
    DRAIN = "drain"  # drained or draining: not schedulable (R5)


class ReleaseReason(StrEnum):
    """Why a reservation ended (SPEC §3); `sentence` and `sentence_then` say it to a person."""

    FILLED = "filled"  # the reservation reached num_gpus by absorbing (b) and dispatched
    SWAP = "swap"  # the job dispatched under (a), elsewhere or beside it (STEP 8)
    R3 = "r3"  # the job is no longer the top job
    R5 = "r5"  # the placement is down, drained, gone, shrunk below the job, or taken
    CANCEL = "cancel"  # the user cancelled the job (the shell emits this, not `decide`)

    @property
    def sentence(self) -> str:
        """Why the reservation is released, as a clause: '… released, as <sentence>'."""
        return _RELEASE_SENTENCES[self][0]

    @property
    def sentence_then(self) -> str:
        """The same, told afterwards: '… was released at <time>: <sentence_then>'."""
        return _RELEASE_SENTENCES[self][1]


_RELEASE_SENTENCES: dict[ReleaseReason, tuple[str, str]] = {
    ReleaseReason.FILLED: (
        "it has all the GPUs it needs there and starts (filled)",
        "it had all the GPUs it needed there and started (filled)",
    ),
    ReleaseReason.SWAP: (
        "it starts on other GPUs (swap)",
        "it started on other GPUs (swap)",
    ),
    ReleaseReason.R3: (
        "it is no longer the top job (R3)",
        "it was no longer the top job (R3)",
    ),
    ReleaseReason.R5: (
        "its placement is down, drained, gone or too small for it now (R5)",
        "its placement went down, was drained or shrank (R5)",
    ),
    ReleaseReason.CANCEL: (
        "the job is cancelled",
        "the job was cancelled",
    ),
}


class WhyCode(StrEnum):
    """Every answer the policy gives to "why isn't my job running?" (SPEC §8)."""

    RESERVING = "RESERVING"  # top job, holds r of n GPUs, waits for the rest
    WAITING_FOR_GPUS = "WAITING_FOR_GPUS"  # no fit placement has enough idle GPUs
    BEHIND_RESERVATION = "BEHIND_RESERVATION"  # it would fit, but the GPUs are reserved
    WAITING_FOR_PRIORITY = "WAITING_FOR_PRIORITY"  # multi-GPU, not top: may not reserve (R2)
    NO_SCHEDULABLE_PLACEMENT = "NO_SCHEDULABLE_PLACEMENT"  # every fit placement down/drained
    NO_FIT_PLACEMENT = "NO_FIT_PLACEMENT"  # nothing in the inventory can hold it any more


class Waiting(StrEnum):
    """Why a queued job is not in the policy's queue (`jobs.waiting`; NULL: it is), as
    `ledger.eligibility` decides it."""

    HELD = "HELD"  # `submit --hold` or `jpushare hold`: until `jpushare release`
    DEPENDENCY = "DEPENDENCY"  # its dependency (or singleton) is not met yet
    ARRAY_LIMIT = "ARRAY_LIMIT"  # K tasks of its array are in the queue or running (`%K`)
    DEPENDENCY_NEVER_SATISFIED = "DEPENDENCY_NEVER_SATISFIED"  # can never be met (Slurm's)


Starting = Literal["STARTING"]
STARTING: Starting = "STARTING"  # queued, and the next cycle would dispatch it (not a WhyCode)

AnswerCode = WhyCode | Waiting | Starting | JobState
"""The code of the service's "why" answer: the policy's code for a queued job as it is
now, STARTING for one the next cycle would dispatch, its `Waiting` reason for one held or
waiting outside the queue, and its state for any other job."""


__all__ = [
    "ACTIVE_STATES",
    "ENDED_STATES",
    "STARTING",
    "AnswerCode",
    "JobId",
    "JobState",
    "NodeState",
    "ReleaseReason",
    "Starting",
    "Waiting",
    "WhyCode",
    "job_id",
    "store_job_id",
]
