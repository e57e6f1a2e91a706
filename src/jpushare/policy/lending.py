"""The lending option (SPEC "Options beyond the note", `reserved_gpus: lend-by-limit`):
which waiting job may run on the top job's reserved GPUs, and until when.

No I/O. The projected fill is EASY backfill's shadow time: when, by the running jobs'
time limits on the reservation's placement, enough GPUs will be free for the top job. A
job whose enforced limit ends by then may borrow reserved GPUs, so the top job never
starts later than that projection. A needed running job with no limit means no lending.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from itertools import compress
from operator import attrgetter

from jpushare.policy.fit import fits
from jpushare.policy.model import QueuedJob, Reservation, Snapshot, Tier

Key = tuple[str, str]


class Lending:
    """One cycle's lending book: the GPUs each reservation lends out, and the running
    jobs' ends per placement (lent jobs excluded: their GPUs are the reservation's)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.now = snapshot.now
        self.capacity = {(p.node, p.tier): p.capacity for p in snapshot.placements}
        self.lent: dict[str, int] = {}
        self.ends: dict[Key, list[tuple[float, int]]] = {}
        self._fill: dict[str, float] = {}
        # A loan counts only while its lender still holds a reservation on that placement;
        # once it is released the borrower is an ordinary running job with a limit.
        holds: dict[str, Key] = {}
        for q in _holders(snapshot):
            if q.reservation is not None:
                holds[q.job_id] = (q.reservation.node, q.reservation.tier)
        for r in snapshot.running:
            if r.lent_from is not None and holds.get(r.lent_from) == (r.node, r.tier):
                self.lent[r.lent_from] = self.lent.get(r.lent_from, 0) + r.num_gpus
            else:
                self.started((r.node, r.tier), r.num_gpus, r.time_limit_s, r.started_at)

    def started(
        self, key: Key, n: int, time_limit_s: float | None, at: float | None = None
    ) -> None:
        """A job holds `n` GPUs of `key` from `at` (default now) for at most its limit."""
        start = self.now if at is None else at
        end = math.inf if time_limit_s is None else start + time_limit_s
        self.ends.setdefault(key, []).append((end, n))
        self._fill.clear()

    def fill_at(self, holder: str, res: Reservation, need: int, idle: int) -> float:
        """The reservation's projected fill: the earliest end by which the running jobs on
        its placement free the `need - res.gpus - idle` GPUs it still lacks (inf when one
        of them has no limit); `now` when nothing is lacking."""
        cached = self._fill.get(holder)
        if cached is not None:
            return cached
        lacking = need - res.gpus - idle
        fill = self.now
        for end, n in sorted(self.ends.get((res.node, res.tier), ())):
            if lacking <= 0:
                break
            lacking -= n
            fill = end
        if lacking > 0:
            fill = math.inf  # the placement cannot hold the job: never lend on it
        self._fill[holder] = fill
        return fill

    def lend(
        self,
        job: QueuedJob,
        holder: str,
        need: int,
        res: Reservation,
        idle: int,
        tiers: dict[str, Tier],
    ) -> float | None:
        """Lend `job` reserved GPUs of `holder` (which needs `need` GPUs) if its limit ends
        by the projected fill: the end of its limit (the loan is booked), else None."""
        if job.time_limit_s is None or job.reservation is not None:
            return None
        tier = tiers.get(res.tier)
        cap = self.capacity.get((res.node, res.tier))
        free = res.gpus - self.lent.get(holder, 0)
        if tier is None or cap is None or job.num_gpus > free:
            return None
        if not fits(job.num_gpus, job.min_sort_order, tier, cap):
            return None
        until = self.now + job.time_limit_s
        fill = self.fill_at(holder, res, need, idle)
        if math.isinf(fill) or until > fill:  # no projection, or it would end too late
            return None
        self.lent[holder] = self.lent.get(holder, 0) + job.num_gpus
        return until


_RESERVATION = attrgetter("reservation")


def _holders(snapshot: Snapshot) -> Iterator[QueuedJob]:
    """The queued jobs that hold a reservation (a C-speed filter: the queue may be long)."""
    return compress(snapshot.queue, map(_RESERVATION, snapshot.queue))
