"""Human sentences for "why isn't my job running?" (SPEC §8). No I/O."""

from __future__ import annotations

from jpushare.policy.model import Why, WhyCode


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def render(why: Why) -> str:
    """One sentence with the numbers behind it; the code says which case it is."""
    rank = f"ranked {why.rank + 1} of {why.queue_length}"
    n = why.num_gpus
    if why.code is WhyCode.NO_FIT_PLACEMENT:
        return (
            f"No placement in the inventory can hold {_gpus(n)} at the job's minimum tier any "
            "more (GPUs were removed since it was submitted); it waits until one can, or cancel it."
        )
    if why.code is WhyCode.NO_SCHEDULABLE_PLACEMENT:
        return (
            f"All {why.fit_placements} placements that can hold {_gpus(n)} are on nodes that are "
            f"down or drained; it is {rank} and waits for a node to return."
        )
    if why.code is WhyCode.RESERVING:
        res = why.reservation
        assert res is not None
        return (
            f"It is the top job and holds a reservation of {res.gpus} of {n} GPUs on "
            f"{res.node} ({res.tier}) since t={res.since:.0f}; it starts when "
            f"{n - res.gpus} more free up there, or at once if another fit placement has "
            f"{n} idle."
        )
    if why.code is WhyCode.BEHIND_RESERVATION:
        res = why.blocking_reservation
        assert res is not None
        return (
            f"It is {rank}; the idle GPUs it could use are reserved by the top job "
            f"{why.blocking_job_id} ({res.gpus} GPUs on {res.node}, {res.tier}), which no "
            "lower-ranked job may take (R4)."
        )
    if why.code is WhyCode.WAITING_FOR_PRIORITY:
        return (
            f"It is {rank} behind top job {why.top_job_id}; it needs {_gpus(n)} on one "
            f"placement and the best of its {why.schedulable_fit_placements} fit placements "
            f"has {why.best_idle} idle; only the top job may reserve GPUs (R2)."
        )
    top = "It is the top job" if why.rank == 0 else f"It is {rank}"
    return (
        f"{top}; it needs {_gpus(n)} on one placement and the best of its "
        f"{why.schedulable_fit_placements} fit placements has {why.best_idle} idle."
    )
