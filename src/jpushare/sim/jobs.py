"""The engine's per-job bookkeeping: a trace job's mutable state, its reservation log and the
per-lab queues in fair-share order, kept apart from the event loop that drives them."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter

from jpushare.formats.trace_file import TraceJob
from jpushare.ledger import Account
from jpushare.policy.decide import RankedQueue
from jpushare.policy.model import (
    QueuedJob,
    ReleaseReason,
    Reservation,
)
from jpushare.sim.results import (
    Attempt,
    TraceJobState,
)
from jpushare.vocabulary import JobId

Key = tuple[str, str]  # (node, tier)


@dataclass(slots=True)
class ReservationLog:
    job_id: JobId
    node: str
    tier: str
    gpus: int
    since: float
    ended_at: float | None = None
    reason: ReleaseReason | None = None


class SimJob:
    """The engine's mutable view of one trace job."""

    __slots__ = (
        "account",
        "attempts",
        "cancel_requested",
        "epoch",
        "min_sort_order",
        "reason",
        "res_span_start",
        "reservation",
        "run_key",
        "run_start",
        "spec",
        "state",
    )

    def __init__(self, spec: TraceJob, min_sort_order: int) -> None:
        self.spec = spec
        self.state = TraceJobState.PENDING
        self.min_sort_order = min_sort_order
        self.reservation: Reservation | None = None
        self.res_span_start = 0.0  # reserved GPUs are costed up to here
        self.attempts: list[Attempt] = []
        self.epoch = 0  # bumps at every dispatch; stale end events carry an old one
        self.run_start = 0.0
        self.run_key: Key = ("", "")
        self.account = Account()  # run and reservation costs, and what reached the lab
        self.cancel_requested = False
        self.reason = ""

    def queued(self) -> QueuedJob:
        s = self.spec
        return QueuedJob(
            s.job_id,
            s.lab,
            s.num_gpus,
            self.min_sort_order,
            s.submit_time,  # queue_entered_at: kept on OOM / node-down requeue (SPEC §5)
            self.reservation,
            s.time_limit_s,
        )


_ENTRY = attrgetter("queue_entered_at", "job_id")
_JOB_ID = attrgetter("job_id")


class LabQueues:
    """The queued jobs of each lab in (queue_entered_at, job id) order.

    The queue in `queue_order` (lab usage, entry time, job id) is then the labs' lists one
    after the other in usage order, merged where usages tie: a cycle gets it as a
    `RankedQueue` without sorting every job (the labs are few).
    """

    def __init__(self) -> None:
        self.keys: dict[str, list[tuple[float, str]]] = {}
        self.jobs: dict[str, list[QueuedJob]] = {}
        self.ids: dict[str, list[str]] = {}

    def put(self, q: QueuedJob) -> None:
        keys = self.keys.get(q.lab)
        if keys is None:
            keys = self.keys[q.lab] = []
            self.jobs[q.lab] = []
            self.ids[q.lab] = []
        k = (q.queue_entered_at, q.job_id)
        i = bisect_left(keys, k)
        if i < len(keys) and keys[i] == k:
            self.jobs[q.lab][i] = q
        else:
            keys.insert(i, k)
            self.jobs[q.lab].insert(i, q)
            self.ids[q.lab].insert(i, q.job_id)

    def remove(self, q: QueuedJob) -> None:
        keys = self.keys[q.lab]
        i = bisect_left(keys, (q.queue_entered_at, q.job_id))
        del keys[i]
        del self.jobs[q.lab][i]
        del self.ids[q.lab][i]

    def ranked(self, lab_usage: dict[str, float]) -> RankedQueue:
        labs = sorted((lab_usage.get(lab, 0.0), lab) for lab, jobs in self.jobs.items() if jobs)
        jobs: list[Iterable[QueuedJob]] = []
        ids: list[Iterable[str]] = []
        i = 0
        while i < len(labs):
            j = i + 1
            while j < len(labs) and labs[j][0] == labs[i][0]:
                j += 1
            if j == i + 1:
                jobs.append(self.jobs[labs[i][1]])
                ids.append(self.ids[labs[i][1]])
            else:  # labs with equal usage: their jobs interleave by entry time, then id
                tied = chain.from_iterable(self.jobs[lab] for _, lab in labs[i:j])
                merged = sorted(tied, key=_ENTRY)  # merges the sorted runs
                jobs.append(merged)
                ids.append(map(_JOB_ID, merged))
            i = j
        return RankedQueue(chain.from_iterable(jobs), lab_usage, chain.from_iterable(ids))
