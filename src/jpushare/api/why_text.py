"""The sentences of a queued job's "why": what is recorded, then what the next cycle would do.

Facts are in the present tense and use only recorded values (a reservation's `since` is
the time the cycle that started it recorded). The projection comes from the policy run on
those same facts; it says "at the next cycle …" and never names a time, because nothing
has happened yet. No I/O here: the caller gathers both (see `api.why`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jpushare.policy import (
    AbsorbReservation,
    Action,
    Dispatch,
    ReleaseReason,
    ReleaseReservation,
    Reservation,
    StartReservation,
)
from jpushare.policy.why import (
    gpus,
    holding,
    no_fit_placement,
    running_on_lent_gpus,
    top_job_reserving,
)
from jpushare.store import from_epoch
from jpushare.vocabulary import STARTING, AnswerCode, JobId, WhyCode


@dataclass(frozen=True, slots=True)
class Facts:
    """What the database says about one queued job now."""

    rank: int  # 0 = the top job
    queue_length: int
    top_job_id: JobId
    num_gpus: int
    reservation: Reservation | None  # its own, as recorded
    fit_placements: int
    schedulable_fit_placements: int
    best_idle: int  # the most idle GPUs on one fit placement, as the table shows them
    blocking: tuple[JobId, Reservation] | None  # the top job's recorded reservation in its way
    is_top: bool = False  # the policy's top job (SPEC decision 7: not always rank 0)


@dataclass(frozen=True, slots=True)
class Projection:
    """What the next cycle would do, from the policy run on the facts."""

    actions: tuple[Action, ...]  # the job's own, in the policy's order
    freed_by: tuple[ReleaseReservation, ...]  # other jobs' releases its own actions use
    blocker: tuple[JobId, Reservation] | None  # the top job's reservation after that cycle,
    # where it holds GPUs this job could use
    best_idle: int  # the most idle GPUs on one fit placement when the cycle reaches the job


def when(at: datetime | None) -> str:
    """A time for a sentence: '2026-01-05 09:00:00 UTC'."""
    if at is None:
        return "an unknown time"
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: float) -> str:
    """A span for a sentence: '45s', '12m05s', '3h07m'."""
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def epoch_time(t: float) -> str:
    """A time of the policy's clock (UNIX seconds in the service) for a sentence."""
    return when(from_epoch(t))


def _on(node: str, tier: str) -> str:
    return f"{node} ({tier})"


def sentence(code: AnswerCode, facts: Facts, projection: Projection) -> str:
    """The answer for a person: the facts, then " At the next cycle …" where it acts."""
    return _facts(code, facts) + _projection(code, facts, projection)


def _who(f: Facts, name_the_top: bool = True) -> str:
    if f.is_top:
        return "It is the top job"
    top = f" behind top job {f.top_job_id}" if name_the_top else ""
    return f"It is ranked {f.rank + 1} of {f.queue_length}{top}"


def _held(res: Reservation, n: int) -> str:
    return holding(res, n, epoch_time)


def _needs(f: Facts) -> str:
    fit = f.schedulable_fit_placements
    best = "its only fit placement" if fit == 1 else f"the best of its {fit} fit placements"
    return f"it needs {gpus(f.num_gpus)} on one placement and {best} has {f.best_idle} idle"


def _facts(code: AnswerCode, f: Facts) -> str:
    n, res = f.num_gpus, f.reservation
    holds = f" and {_held(res, n)}" if res is not None else ""
    if code == WhyCode.NO_FIT_PLACEMENT:
        return no_fit_placement(n) + (f" It {_held(res, n)}." if res is not None else "")
    if code == WhyCode.NO_SCHEDULABLE_PLACEMENT:
        where = (
            f"The only placement that can hold {gpus(n)} is on a node that is"
            if f.fit_placements == 1
            else f"All {f.fit_placements} placements that can hold {gpus(n)} are on nodes that are"
        )
        who = _who(f)
        return (
            f"{where} down or drained; {who[0].lower()}{who[1:]}{holds} and waits for a node "
            "to return."
        )
    if code == STARTING:
        return f"{_who(f)}{holds}." if res is not None else f"{_who(f)}; {_needs(f)}."
    if code == WhyCode.RESERVING:
        assert res is not None
        if not f.is_top:
            return f"{_who(f)}{holds}."
        return top_job_reserving(res, n, epoch_time)
    if code == WhyCode.BEHIND_RESERVATION and f.blocking is not None:
        job, held = f.blocking
        return (
            f"{_who(f, False)}; the idle GPUs it could use are reserved by the top job {job} "
            f"({gpus(held.gpus)} on {held.node}, {held.tier}, since "
            f"{epoch_time(held.since)}), which no lower-ranked job may take (R4)."
        )
    if code == WhyCode.WAITING_FOR_PRIORITY:
        return f"{_who(f)}; {_needs(f)}; only the top job may reserve GPUs (R2)."
    none = " and holds no reservation" if f.is_top and n >= 2 else ""
    return f"{_who(f)}{none}; {_needs(f)}."


def _projection(code: AnswerCode, f: Facts, p: Projection) -> str:
    """ " At the next cycle …", or "" when the next cycle would leave the job as it is."""
    n = f.num_gpus
    start = next((a for a in p.actions if isinstance(a, Dispatch)), None)
    reserve = next((a for a in p.actions if isinstance(a, StartReservation)), None)
    absorb = next((a for a in p.actions if isinstance(a, AbsorbReservation)), None)
    release = next((a for a in p.actions if isinstance(a, ReleaseReservation)), None)
    steps: list[str] = [
        f"job {r.job_id} will lose its reservation of {gpus(r.gpus)} on {_on(r.node, r.tier)}, "
        f"as {r.reason.sentence}"
        for r in p.freed_by
    ]
    it = "this job" if steps else "it"
    if start is not None:
        where = _on(start.node, start.tier)
        if release is not None and release.reason is ReleaseReason.SWAP:
            steps.append(
                f"{it} will start on {where} and its reservation on "
                f"{_on(release.node, release.tier)} will be released (swap)"
            )
        elif absorb is not None:
            steps.append(
                f"{it} will take the last {gpus(absorb.added)} it needs there and start on "
                f"{where} with its reservation"
            )
        elif release is not None:
            steps.append(f"{it} will start on {where} with its reservation")
        elif start.lent_from is not None and start.lent_until is not None:
            steps.append(
                f"{it} will start on {where}, where it "
                + running_on_lent_gpus(start.lent_from, start.lent_until, epoch_time)
            )
        else:
            steps.append(f"{it} will start on {where}")
    else:
        if release is not None:
            steps.append(f"its reservation will be released, as {release.reason.sentence}")
        if reserve is not None:
            steps.append(
                f"{it} will reserve {gpus(reserve.gpus)} on {_on(reserve.node, reserve.tier)} "
                f"and wait there for {n - reserve.gpus} more, or start at once where {n} are idle"
            )
        elif absorb is not None:
            steps.append(
                f"{it} will take {absorb.added} more idle there ({absorb.total} of {n} reserved)"
            )
    if not steps and code != STARTING:
        steps = _still_waiting(code, f, p)
    if not steps:
        return ""
    text = ", and ".join(steps) if len(steps) < 3 else ", ".join(steps[:-1]) + ", and " + steps[-1]
    return f" At the next cycle {text}."


def on_lent_gpus(lender: int, until: datetime | None) -> str:
    """The sentence of a run on lent GPUs (`reserved_gpus: lend-by-limit`)."""
    if until is None:  # not from a lent dispatch of this version: no time to name
        return f"It runs on GPUs reserved for job {lender}."
    return f"It {running_on_lent_gpus(str(lender), until.timestamp(), epoch_time)}."


def _still_waiting(code: AnswerCode, f: Facts, p: Projection) -> list[str]:
    """Why the job will still wait after the next cycle, where the facts do not say it."""
    if code in (WhyCode.NO_FIT_PLACEMENT, WhyCode.NO_SCHEDULABLE_PLACEMENT, WhyCode.RESERVING):
        return []
    if p.blocker is not None:
        job, res = p.blocker
        recorded = f.blocking[1].gpus if f.blocking is not None else 0
        if res.gpus != recorded:
            verb = "reserve" if recorded == 0 else "hold"
            return [
                f"top job {job} will {verb} {gpus(res.gpus)} on {_on(res.node, res.tier)} "
                "that this job could use, which no lower-ranked job may take (R4)"
            ]
    if f.best_idle >= f.num_gpus and p.best_idle < f.num_gpus:
        return [
            f"the jobs ranked above it will take those GPUs first, leaving at most "
            f"{p.best_idle} idle on one of its fit placements"
        ]
    return []


__all__ = [
    "STARTING",
    "Facts",
    "Projection",
    "duration",
    "epoch_time",
    "gpus",
    "on_lent_gpus",
    "sentence",
    "when",
]
