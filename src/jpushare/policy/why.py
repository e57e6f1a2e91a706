""" "Why isn't my job running?" (SPEC §8): the answers as data, and their sentences. No I/O.

`decide` records, for each waiting job, only its rank and a view shared by every job of
the same (size, minimum tier) class; `WhyTable` builds the `Why` of a job when asked, so
a cycle over 10^5 jobs does not build 10^5 answers nobody reads.

A `Why` describes the job as the cycle's own decisions leave it: a reservation this cycle
starts or grows is in it, with `since` = the cycle's `now`. That is the truth once the
decisions are applied (the simulator, the dispatcher); a shell that runs `decide` only to
explain must not present it as done (the API states what is recorded and phrases the rest
as "at the next cycle", see `jpushare.api.why`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import chain
from typing import NamedTuple

from jpushare.policy.model import QueuedJob, Reservation, Why
from jpushare.vocabulary import JobId, WhyCode


class ClassView(NamedTuple):
    """What a waiting job of one (num_gpus, minimum tier) class sees during a cycle."""

    generation: int  # the idle index's generation it was computed at
    best_idle: int  # the most idle GPUs on one fit placement
    fit_placements: int
    schedulable_fit_placements: int
    blocker: tuple[str, Reservation] | None  # the top job's reservation, if it holds GPUs
    # this class could otherwise use


def classify(
    rank: int,
    num_gpus: int,
    view: ClassView,
    reservation: Reservation | None,
    *,
    top: bool | None = None,
) -> WhyCode:
    """The reason code; the first matching case wins. `top`: whether the job is the top
    job (SPEC decision 7: not always rank 0); None reads it as rank 0."""
    is_top = rank == 0 if top is None else top
    if view.fit_placements == 0:
        return WhyCode.NO_FIT_PLACEMENT
    if view.schedulable_fit_placements == 0:
        return WhyCode.NO_SCHEDULABLE_PLACEMENT
    if reservation is not None:
        return WhyCode.RESERVING
    if view.blocker is not None:
        return WhyCode.BEHIND_RESERVATION
    if not is_top and num_gpus >= 2:
        return WhyCode.WAITING_FOR_PRIORITY
    return WhyCode.WAITING_FOR_GPUS


class WhyTable(Mapping[str, Why]):
    """job id -> Why for every job still queued after a cycle; answers are built on access.

    Held as the cycle recorded it: the waiting jobs' positions in the ranked queue, the
    view each saw, the reservations held, and the tail of the queue from `tail` on, where
    every job waits with its class's view in `tail_views`; the job id -> entry index is
    built on the first lookup (a simulator cycle never looks one up)."""

    __slots__ = (
        "_held",
        "_index",
        "_order",
        "_queue",
        "_tail",
        "_tail_views",
        "_top_job_id",
        "_views",
        "_waiting",
    )

    def __init__(
        self,
        queue: Sequence[QueuedJob],
        order: Sequence[JobId],
        waiting: list[int],
        views: list[ClassView],
        held: dict[int, Reservation],
        top_job_id: JobId,
        tail: int | None = None,
        tail_views: Mapping[tuple[int, int], ClassView] | None = None,
    ) -> None:
        self._queue = queue  # ranked, as `order`
        self._order = order
        self._waiting = waiting  # positions in `order` of the jobs still queued
        self._views = views  # the view each of them saw, index for index
        self._held = held  # position -> its reservation after the cycle
        self._top_job_id = top_job_id
        self._index: dict[JobId, int] | None = None
        self._tail = len(order) if tail is None else tail
        self._tail_views = tail_views or {}

    def _ids(self) -> Iterator[JobId]:
        return chain(map(self._order.__getitem__, self._waiting), self._order[self._tail :])

    @property
    def top_job_id(self) -> JobId:
        """The cycle's top job (R2/R3's, SPEC decision 7); "" when every job could start."""
        return self._top_job_id

    def _entries(self) -> dict[JobId, int]:
        if self._index is None:
            self._index = dict(zip(self._ids(), range(len(self)), strict=True))
        return self._index

    def __getitem__(self, job_id: JobId) -> Why:
        k = self._entries()[job_id]
        if k < len(self._waiting):
            rank = self._waiting[k]
            view = self._views[k]
        else:  # in the tail: its class's view
            rank = self._tail + k - len(self._waiting)
            job = self._queue[rank]
            view = self._tail_views[(job.num_gpus, job.min_sort_order)]
        num_gpus = self._queue[rank].num_gpus
        reservation = self._held.get(rank)
        code = classify(rank, num_gpus, view, reservation, top=job_id == self._top_job_id)
        blocker = view.blocker if code is WhyCode.BEHIND_RESERVATION else None
        return Why(
            job_id=job_id,
            code=code,
            rank=rank,
            queue_length=len(self._order),
            top_job_id=self._top_job_id,
            num_gpus=num_gpus,
            fit_placements=view.fit_placements,
            schedulable_fit_placements=view.schedulable_fit_placements,
            best_idle=view.best_idle,
            reservation=reservation,
            blocking_job_id=blocker[0] if blocker else None,
            blocking_reservation=blocker[1] if blocker else None,
        )

    def __iter__(self) -> Iterator[str]:
        return self._ids()

    def __len__(self) -> int:
        return len(self._waiting) + len(self._order) - self._tail

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._entries()


TimeFormat = Callable[[float], str]
"""How a sentence writes a time of the policy's clock (seconds)."""


def clock_time(t: float) -> str:
    """The policy's own clock, as the simulator runs it: 't=300'."""
    return f"t={t:.0f}"


def gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def holding(res: Reservation, num_gpus: int, at: TimeFormat = clock_time) -> str:
    """'holds a reservation of r of n GPUs on node (tier) since <time>'."""
    return (
        f"holds a reservation of {res.gpus} of {num_gpus} GPUs on {res.node} ({res.tier}) "
        f"since {at(res.since)}"
    )


def no_fit_placement(num_gpus: int) -> str:
    """The NO_FIT_PLACEMENT sentence (it has no numbers but the job's size)."""
    return (
        f"No placement in the inventory can hold {gpus(num_gpus)} at the job's minimum tier "
        "any more (GPUs were removed since it was submitted); it waits until one can, or "
        "cancel it."
    )


def top_job_reserving(res: Reservation, num_gpus: int, at: TimeFormat = clock_time) -> str:
    """The RESERVING sentence of the top job."""
    n = num_gpus
    return (
        f"It is the top job and {holding(res, n, at)}; it starts when {n - res.gpus} more "
        f"free up there, or at once if another fit placement has {n} idle."
    )


def render(why: Why, at: TimeFormat = clock_time) -> str:
    """One sentence with the numbers behind it; the code says which case it is. `at`
    writes the times (the service passes its calendar time)."""
    rank = f"ranked {why.rank + 1} of {why.queue_length}"
    n = why.num_gpus
    if why.code is WhyCode.NO_FIT_PLACEMENT:
        return no_fit_placement(n)
    if why.code is WhyCode.NO_SCHEDULABLE_PLACEMENT:
        return (
            f"All {why.fit_placements} placements that can hold {gpus(n)} are on nodes that are "
            f"down or drained; it is {rank} and waits for a node to return."
        )
    if why.code is WhyCode.RESERVING:
        assert why.reservation is not None
        return top_job_reserving(why.reservation, n, at)
    if why.code is WhyCode.BEHIND_RESERVATION:
        res = why.blocking_reservation
        assert res is not None
        return (
            f"It is {rank}; the idle GPUs it could use are reserved by the top job "
            f"{why.blocking_job_id} ({gpus(res.gpus)} on {res.node}, {res.tier}), which no "
            "lower-ranked job may take (R4)."
        )
    if why.code is WhyCode.WAITING_FOR_PRIORITY:
        return (
            f"It is {rank} behind top job {why.top_job_id}; it needs {gpus(n)} on one "
            f"placement and the best of its {why.schedulable_fit_placements} fit placements "
            f"has {why.best_idle} idle; only the top job may reserve GPUs (R2)."
        )
    top = "It is the top job" if why.job_id == why.top_job_id else f"It is {rank}"
    return (
        f"{top}; it needs {gpus(n)} on one placement and the best of its "
        f"{why.schedulable_fit_placements} fit placements has {why.best_idle} idle."
    )


def running_on_lent_gpus(holder: str, until: float, at: TimeFormat = clock_time) -> str:
    """The sentence for a job started on lent GPUs (`reserved_gpus: lend-by-limit`): its
    time limit ends before the reserving job's projected fill, so it never delays it."""
    return (
        f"runs on GPUs reserved for job {holder} until {at(until)}, its time limit, before "
        "those GPUs are needed"
    )
