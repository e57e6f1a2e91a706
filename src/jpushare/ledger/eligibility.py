"""Whether a queued job may enter the policy's queue: its hold, its dependency
(sbatch's `--dependency`) and its array's throttle (`--array …%K`). Pure: plain values in,
a verdict out; the store reads the states it needs with set-based queries and applies it.

A job that is not eligible is not in the policy's queue at all (SPEC decision: its queue
entry time is the moment it becomes eligible), so fair share never sees it.

Dependency grammar (Slurm's): `TYPE:ID[:ID…]` terms, joined by `,` (all must be met) or
`?` (any one), or `singleton`. TYPE is `after` (the jobs have left the queue: started or
ended), `afterok` (ended COMPLETED), `afternotok` (ended FAILED or CANCELLED), `afterany`
(ended at all). An ID is a job id or `ARRAY_TASK`; an array's id names every task.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from jpushare.vocabulary import ENDED_STATES, JobState, Waiting

KINDS = ("after", "afterok", "afternotok", "afterany")
_ID = re.compile(r"[1-9][0-9]{0,17}(?:_(?:0|[1-9][0-9]{0,6}))?")
MAX_DEPENDENCY_JOBS = 1000  # the most job ids one dependency may name, after expansion


class Met(StrEnum):
    """A dependency term's (or the whole dependency's) status now."""

    MET = "met"
    WAIT = "wait"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class Term:
    """One `TYPE:ID[:ID…]` of a dependency, its ids as typed (`12`, `12_3`)."""

    kind: str
    ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Dependency:
    """A parsed `--dependency`: `singleton`, or terms all (`,`) or any (`?`) of which must
    be met."""

    terms: tuple[Term, ...] = ()
    any_of: bool = False
    singleton: bool = False

    def text(self) -> str:
        """The dependency as sbatch writes it (what is stored and shown)."""
        parts = [f"{t.kind}:{':'.join(t.ids)}" for t in self.terms]
        if self.singleton:
            parts.append("singleton")
        return ("?" if self.any_of else ",").join(parts)


def parse_dependency(text: str) -> Dependency:
    """sbatch's `--dependency` text; ValueError with a sentence if it is not one."""
    text = text.strip()
    if not text:
        raise ValueError("an empty dependency")
    if "," in text and "?" in text:
        raise ValueError("a dependency joins its terms with ',' (all) or '?' (any), not both")
    any_of = "?" in text
    terms: list[Term] = []
    singleton = False
    for part in text.split("?" if any_of else ","):
        part = part.strip()
        if part == "singleton":
            singleton = True
            continue
        kind, _, rest = part.partition(":")
        if kind not in KINDS:
            raise ValueError(
                f"{part!r}: a dependency term is singleton or TYPE:JOB[:JOB…] with TYPE one "
                f"of {', '.join(KINDS)} (e.g. afterok:12)"
            )
        ids = tuple(rest.split(":")) if rest else ()
        if not ids or not all(_ID.fullmatch(i) for i in ids):
            raise ValueError(f"{part!r}: name jobs by id, JOB or ARRAY_TASK (e.g. {kind}:12:13_2)")
        terms.append(Term(kind, ids))
    if singleton and any_of:
        raise ValueError("singleton cannot be one of several '?' alternatives")
    return Dependency(tuple(terms), any_of, singleton)


def term_status(kind: str, state: JobState | None) -> Met:
    """One named job's part of a term. A job the store no longer has counts as met (as
    Slurm treats a purged job)."""
    if state is None:
        return Met.MET
    if kind == "after":
        return Met.WAIT if state is JobState.GLOBAL_QUEUE_WAIT else Met.MET
    if state not in ENDED_STATES:
        return Met.WAIT
    if kind == "afterany":
        return Met.MET
    ok = state is JobState.COMPLETED
    if kind == "afterok":
        return Met.MET if ok else Met.NEVER
    return Met.NEVER if ok else Met.MET  # afternotok


def _all(statuses: list[Met]) -> Met:
    if Met.NEVER in statuses:
        return Met.NEVER
    return Met.WAIT if Met.WAIT in statuses else Met.MET


def dependency_status(
    resolved: Mapping[str, tuple[int, ...]], dep: Dependency, states: Mapping[int, JobState]
) -> tuple[Met, str]:
    """Whether `dep` is met, with what it waits for (or why it never will be) in words.

    `resolved`: each term's typed ids -> the job ids they name (an array: every task).
    `states`: those jobs' states (a job missing here is gone: met)."""
    statuses: list[Met] = []
    waits: list[str] = []
    nevers: list[str] = []
    for term in dep.terms:
        per_job: list[Met] = []
        for typed in term.ids:
            for jid in resolved.get(typed, ()):
                state = states.get(jid)
                s = term_status(term.kind, state)
                per_job.append(s)
                label = state.value if state is not None else "gone"
                if s is Met.WAIT:
                    waits.append(f"{term.kind}:{jid} (job {jid} is {label})")
                elif s is Met.NEVER:
                    nevers.append(f"{term.kind}:{jid} (job {jid} ended {label})")
        statuses.append(_all(per_job))
    if not statuses:
        return Met.MET, ""
    if dep.any_of:
        if Met.MET in statuses:
            return Met.MET, ""
        if all(s is Met.NEVER for s in statuses):
            return Met.NEVER, "; ".join(nevers)
        return Met.WAIT, " or ".join(waits)
    overall = _all(statuses)
    if overall is Met.NEVER:
        return Met.NEVER, "; ".join(nevers)
    return overall, ", ".join(waits)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A queued job's eligibility: `waiting` None (it may enter the queue) or why not, and
    what it waits for in words (for `why` and the queue's reason)."""

    waiting: Waiting | None
    waits_for: str = ""


def verdict(
    *,
    held: bool,
    dependency: tuple[Met, str] = (Met.MET, ""),
    singleton_busy: int | None = None,
    array_active: int | None = None,
    array_limit: int | None = None,
) -> Verdict:
    """The one rule, checked in this order: a hold; a dependency never met (stays so, or
    the caller cancels it under --kill-on-invalid-dep); a dependency not met yet; a
    singleton whose user has job `singleton_busy` of the same name active; the array
    throttle (`array_active` of its tasks active, at most `array_limit`)."""
    status, words = dependency
    if held:
        return Verdict(Waiting.HELD, "held: `jpushare release` lets it queue")
    if status is Met.NEVER:
        return Verdict(Waiting.DEPENDENCY_NEVER_SATISFIED, f"dependency can never be met: {words}")
    if status is Met.WAIT:
        return Verdict(Waiting.DEPENDENCY, f"dependency: waits for {words}")
    if singleton_busy is not None:
        return Verdict(
            Waiting.DEPENDENCY,
            f"dependency: singleton, waits for job {singleton_busy} of the same name and user",
        )
    if array_limit is not None and array_active is not None and array_active >= array_limit:
        return Verdict(Waiting.ARRAY_LIMIT, f"array limit: {array_active} of {array_limit} running")
    return Verdict(None)
