"""The figures the job pages add to the API's answers: elapsed and time left, the bill so
far of a job in flight, and who holds the busy GPUs of each placement.

Pure functions of the API's models (or, for the bill, the store's record, which holds when
a reservation was last accrued) and a clock reading, so every page shows what the API
would for the same instant. Elapsed and time left are the CLI's own rules
(`client.job_commands`), the same numbers `jpushare jobs` and `jpushare show` print.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from jpushare.api.schemas.jobs import JobPublic
from jpushare.client import job_commands
from jpushare.store.records import JobRecord
from jpushare.vocabulary import JobState

_CLOCK_FIELDS = {"state", "started_at", "ended_at", "time_limit_s"}


def elapsed_s(job: JobPublic, now: datetime) -> float | None:
    """How long its current (or last) attempt has run: to `now` while it runs."""
    return job_commands.elapsed_s(job.model_dump(mode="json", include=_CLOCK_FIELDS), now)


def time_left_s(job: JobPublic, now: datetime) -> float | None:
    """A running job's time limit less what it has run; None without a limit."""
    return job_commands.time_left_s(job.model_dump(mode="json", include=_CLOCK_FIELDS), now)


@dataclass(frozen=True, slots=True)
class BillSoFar:
    """A job's cost up to now, in TFLOP-s: `run` (ended attempts plus the running one so
    far), `reservation` (accrued), and how much of it its lab has been charged."""

    run: float
    reservation: float
    charged: float

    @property
    def total(self) -> float:
        return self.run + self.reservation

    @property
    def in_flight(self) -> float:
        """What the lab will still be charged for what the job has held until now."""
        owed = self.total - self.charged
        return owed if owed > 1e-9 * max(1.0, self.total) else 0.0  # not float dust


def bill_so_far(job: JobRecord, tflops_by_tier: Mapping[str, float], now: datetime) -> BillSoFar:
    """The job's bill if it ended now, counted as `store.aggregates.lab_in_flight` counts it
    for its lab (a test holds the two together): the recorded run cost (attempts that
    ended) plus the running attempt's GPUs × time since it started × its tier's TFLOPS;
    the reservation cost accrued so far plus its GPUs × time since it was last accrued ×
    the reserved tier's TFLOPS."""
    run = job.run_cost
    tflops = tflops_by_tier.get(job.tier_name or "")
    if job.state == JobState.RUNNING and job.started_at is not None and tflops is not None:
        run += job.num_gpus * max(0.0, (now - job.started_at).total_seconds()) * tflops
    reservation = job.reservation_cost_tflop_s
    accrued = job.reservation_last_accrued_at or job.reservation_since
    reserved_tflops = tflops_by_tier.get(job.reserved_tier_name or "")
    if job.reserved_gpus and accrued is not None and reserved_tflops is not None:
        reservation += (
            job.reserved_gpus * max(0.0, (now - accrued).total_seconds()) * reserved_tflops
        )
    return BillSoFar(run, reservation, job.charged_tflop_s)


PlacementKey = tuple[str, str]  # (node, tier)


def holders_by_placement(active: Iterable[JobPublic]) -> dict[PlacementKey, list[JobPublic]]:
    """The jobs that hold GPUs of each placement (dispatched or running), oldest first: the
    job, user and lab `squeue` shows for them. A placement's other busy GPUs are used by
    jobs outside JPU-Share."""
    out: dict[PlacementKey, list[JobPublic]] = defaultdict(list)
    for job in sorted(active, key=lambda j: j.id):
        if job.state.active and job.node and job.tier:
            out[(job.node, job.tier)].append(job)
    return dict(out)
