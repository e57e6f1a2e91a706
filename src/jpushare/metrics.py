"""The Prometheus metrics of the service: their names, and the hook the dispatcher calls.

One `ServiceMetrics` per process holds its own `CollectorRegistry` (never the global
one, so two apps in one test process cannot collide). It exports two kinds of figures:

- **From the database, at scrape time** (`collect_figures_from`): queue length, jobs by
  state, GPUs running/reserved/idle per tier, reservations started and ended by reason,
  reservation hold time, lab usage. They are read from the tables, reservations from the
  `job_events` history, so every API replica reports the same, correct numbers whichever
  process did the work.
- **In-process**: `jpushare_dispatch_cycle_seconds`, a Histogram the dispatcher feeds.

Dispatcher hook (`serve` calls it after each cycle with the cycle report's duration):

    metrics = ServiceMetrics()                       # or: metrics_of(app) / app's one
    app = create_app(sessions, metrics=metrics)      # the API exports the same registry
    metrics.observe_dispatch_cycle(seconds)          # one whole cycle's duration

When the API and the dispatcher share a process, pass the same `ServiceMetrics` to both
(`create_app(..., metrics=m)`, or take `jpushare.api.metrics_of(app)`): GET /metrics then
shows the histogram next to the database figures. A dispatcher in a process without the
API may keep its own instance; its histogram is then simply not scraped.

Names (labels in braces):
    jpushare_queue_length                                  gauge
    jpushare_jobs{state}                                   gauge, every JobState
    jpushare_jobs_submitted_total                          counter
    jpushare_gpus{tier,status}                             gauge, status: running | reserved |
                                                           idle | unavailable
    jpushare_gpu_capacity{tier}                            gauge
    jpushare_reservations_active                           gauge
    jpushare_reservations_started_total                    counter
    jpushare_reservations_ended_total{reason}              counter, reason: filled | swap |
                                                           r3 | r5 | cancel
    jpushare_reservation_hold_seconds                      histogram, ended reservations
    jpushare_lab_reservations_started_total{lab}           counter  } the SPEC §10 watch-list:
    jpushare_lab_reservations_failed_total{lab}            counter  } failed = r3, r5, cancel
    jpushare_ended_jobs_total{gpus}                        counter, ended jobs by size
    jpushare_ended_job_tflop_seconds_total{gpus,cost}      counter, cost: run | reservation |
                                                           charged (burden = charged / run)
    jpushare_job_wait_seconds{gpus}                        summary (_count, _sum): submission to
                                                           first dispatch of ended jobs
    jpushare_lab_usage_tflop_seconds{lab}                  gauge
    jpushare_database_up                                   gauge, 0 when the figures could
                                                           not be read (the rest are absent)
    jpushare_dispatch_cycle_seconds                        histogram, from the hook
    jpushare_notifications_total{channel,outcome}          counter, in-process (the notifier's
                                                           hook): channel mail | webhook;
                                                           outcome sent | failed_try |
                                                           given_up | no_address

The dispatcher's health, also from the database (`store.health`, written by the
dispatching process each cycle, and the lease row), so API worker processes and standby
replicas export the leader's figures:

    jpushare_dispatcher_cycles_total                       counter, cycles that succeeded
    jpushare_dispatcher_cycles_failed_total{kind}          counter, kind: executor (the
                                                           executor could not be observed) |
                                                           database | lease_lost | error
    jpushare_executor_calls_failed_total{call}             counter, call: submit (sbatch),
                                                           runs and find (squeue), inventory
                                                           (sinfo), lost_run (sacct), cancel
                                                           (scancel); the local executor's
                                                           methods of the same names
    jpushare_dispatcher_last_success_timestamp_seconds     gauge, 0 before the first
    jpushare_dispatcher_cycle_interval_seconds             gauge, JPUSHARE_CYCLE_S of the
                                                           dispatcher that last succeeded
    jpushare_dispatcher_leader{holder}                     gauge, 1 for the lease holder
    jpushare_dispatcher_lease_expires_timestamp_seconds    gauge
    jpushare_dispatcher_lease_epoch                        gauge (counter-like: leaderships)
    jpushare_jobs_requeued_total{cause}                    counter, cause: oom | node_failure
    jpushare_oldest_queued_job_wait_seconds                gauge, 0 with an empty queue
    jpushare_gpus_foreign{tier}                            gauge, GPUs used outside JPU-Share
                                                           at the last observation

LLM backfill (issue 22; the keeper's `backfill/` directory, of the local executor's state
directory or the Slurm executor's log directory, read at scrape time; absent without one):

    jpushare_backfill_servers                              gauge, servers running now
    jpushare_backfill_gpu_seconds_total{on}                counter, on: reserved | idle: GPU-
                                                           seconds backfill served on them
    jpushare_idle_gpu_seconds_total                        counter, GPU-seconds with neither a
                                                           research job nor a backfill server
    jpushare_backfill_yield_seconds                        summary (_count, _sum): dispatch ->
                                                           the job's GPUs free of backfill
    jpushare_backfill_yield_seconds_max                    gauge, the slowest yield so far
    jpushare_backfill_yields_killed_total                  counter, servers killed after their
                                                           grace
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from jpushare.store.health import DispatcherHealth
from jpushare.store.leadership import LeaseRecord
from jpushare.store.watch_records import LabReservationTotals, SizeTotals
from jpushare.vocabulary import JobState, ReleaseReason

log = logging.getLogger(__name__)

# A cycle should take well under a second (target: 500 ms with 10,000 queued jobs).
DISPATCH_CYCLE_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Reservations last from one cycle (5 s) to hours.
HOLD_BUCKETS_S = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0)
GPU_STATUSES = ("running", "reserved", "idle", "unavailable")
RELEASE_REASONS = tuple(r.value for r in ReleaseReason)
CYCLE_FAILURE_KINDS = ("executor", "database", "lease_lost", "error")
EXECUTOR_CALLS = ("submit", "runs", "find", "inventory", "lost_run", "cancel")
REQUEUE_CAUSES = ("oom", "node_failure")


@dataclass(frozen=True, slots=True)
class TierGpus:
    """One tier's GPUs, summed over its placements."""

    capacity: int = 0
    running: int = 0  # busy: used by research jobs now
    reserved: int = 0  # held by reservations (R4)
    idle: int = 0  # free for research jobs, on schedulable placements
    unavailable: int = 0  # neither busy nor reserved, on down or drained nodes


@dataclass(frozen=True, slots=True)
class MetricFigures:
    """Everything the database-backed metrics show, read in one transaction."""

    queue_length: int
    jobs_by_state: Mapping[str, int]
    jobs_submitted: int
    gpus_by_tier: Mapping[str, TierGpus]
    reservations_active: int
    reservations_started: int
    reservations_ended: Mapping[str, int]  # reason -> count
    # Ended reservations' hold times: cumulative counts per HOLD_BUCKETS_S bound, then all.
    hold_bucket_counts: Sequence[int] = field(default_factory=tuple)
    hold_count: int = 0
    hold_sum_s: float = 0.0
    lab_usage: Mapping[str, float] = field(default_factory=dict)
    # SPEC §10, all time: reservations per lab, ended jobs per size (GPU count).
    lab_reservations: Mapping[str, LabReservationTotals] = field(default_factory=dict)
    ended_by_size: Mapping[int, SizeTotals] = field(default_factory=dict)
    # The dispatcher's health, as every API process reads it from the database.
    health: DispatcherHealth = field(default_factory=DispatcherHealth)
    lease: LeaseRecord | None = None
    requeues: Mapping[str, int] = field(default_factory=dict)  # cause -> count
    oldest_queued_at: datetime | None = None
    foreign_gpus: Mapping[str, int] = field(default_factory=dict)  # tier -> GPUs
    now: datetime | None = None


class FiguresCollector(Collector):
    """Reads `MetricFigures` on every scrape and turns them into metric families."""

    def __init__(self, read: Callable[[], MetricFigures]) -> None:
        self._read = read

    def describe(self) -> Iterable[Metric]:
        # Without this, registering would call collect() (and hit the database) at once.
        return list(_families(None))

    def collect(self) -> Iterable[Metric]:
        try:
            figures = self._read()
        except Exception:
            log.exception("metrics: the database figures could not be read")
            up = GaugeMetricFamily("jpushare_database_up", "1 if the figures below were read")
            up.add_metric([], 0)
            return [up]
        return list(_families(figures))


def _families(f: MetricFigures | None) -> Iterator[Metric]:
    up = GaugeMetricFamily("jpushare_database_up", "1 if the database figures were read")
    queue = GaugeMetricFamily("jpushare_queue_length", "jobs in GLOBAL_QUEUE_WAIT")
    jobs = GaugeMetricFamily("jpushare_jobs", "jobs by state", labels=["state"])
    submitted = CounterMetricFamily("jpushare_jobs_submitted", "jobs ever submitted")
    gpus = GaugeMetricFamily(
        "jpushare_gpus",
        "GPUs per tier: running, reserved, idle, unavailable",
        labels=["tier", "status"],
    )
    capacity = GaugeMetricFamily("jpushare_gpu_capacity", "GPUs in the inventory", labels=["tier"])
    active = GaugeMetricFamily("jpushare_reservations_active", "reservations held now")
    started = CounterMetricFamily("jpushare_reservations_started", "reservations ever started")
    ended = CounterMetricFamily(
        "jpushare_reservations_ended", "reservations ended, by reason", labels=["reason"]
    )
    hold = HistogramMetricFamily(
        "jpushare_reservation_hold_seconds", "how long ended reservations were held"
    )
    usage = GaugeMetricFamily(
        "jpushare_lab_usage_tflop_seconds", "lab cumulative usage (SPEC §4)", labels=["lab"]
    )
    lab_started = CounterMetricFamily(
        "jpushare_lab_reservations_started", "reservations started, by lab", labels=["lab"]
    )
    lab_failed = CounterMetricFamily(
        "jpushare_lab_reservations_failed",
        "reservations released by r3, r5 or cancel (SPEC §10 failed), by lab",
        labels=["lab"],
    )
    ended_jobs = CounterMetricFamily(
        "jpushare_ended_jobs", "jobs ended (completed, failed, cancelled), by size", labels=["gpus"]
    )
    cost = CounterMetricFamily(
        "jpushare_ended_job_tflop_seconds",
        "ended jobs' run, reservation and charged TFLOP-s, by size (burden = charged / run)",
        labels=["gpus", "cost"],
    )
    wait = SummaryMetricFamily(
        "jpushare_job_wait_seconds",
        "ended jobs' wait from submission to first dispatch, by size",
        labels=["gpus"],
    )
    if f is not None:
        for lab, totals in sorted(f.lab_reservations.items()):
            lab_started.add_metric([lab], totals.started)
            lab_failed.add_metric([lab], totals.failed)
        for n, size in sorted(f.ended_by_size.items()):
            ended_jobs.add_metric([str(n)], size.jobs)
            cost.add_metric([str(n), "run"], size.run_tflop_s)
            cost.add_metric([str(n), "reservation"], size.reservation_tflop_s)
            cost.add_metric([str(n), "charged"], size.charged_tflop_s)
            wait.add_metric([str(n)], size.waited, size.wait_sum_s)
        up.add_metric([], 1)
        queue.add_metric([], f.queue_length)
        for state in JobState:
            jobs.add_metric([state.value], f.jobs_by_state.get(state.value, 0))
        submitted.add_metric([], f.jobs_submitted)
        for tier, t in sorted(f.gpus_by_tier.items()):
            capacity.add_metric([tier], t.capacity)
            for status in GPU_STATUSES:
                gpus.add_metric([tier, status], getattr(t, status))
        active.add_metric([], f.reservations_active)
        started.add_metric([], f.reservations_started)
        for reason in RELEASE_REASONS:
            ended.add_metric([reason], f.reservations_ended.get(reason, 0))
        counts = list(f.hold_bucket_counts) or [0] * len(HOLD_BUCKETS_S)
        buckets = [(_bound(b), float(c)) for b, c in zip(HOLD_BUCKETS_S, counts, strict=True)]
        buckets.append(("+Inf", float(f.hold_count)))
        hold.add_metric([], buckets, f.hold_sum_s)
        for lab, value in sorted(f.lab_usage.items()):
            usage.add_metric([lab], value)
    yield from (up, queue, jobs, submitted, gpus, capacity, active, started, ended, hold, usage)
    yield from (lab_started, lab_failed, ended_jobs, cost, wait)
    yield from _health_families(f)


def _health_families(f: MetricFigures | None) -> Iterator[Metric]:
    """The dispatcher's health (see the module docstring)."""
    ok = CounterMetricFamily("jpushare_dispatcher_cycles", "dispatcher cycles that succeeded")
    failed = CounterMetricFamily(
        "jpushare_dispatcher_cycles_failed",
        "dispatcher cycles that failed, by kind",
        labels=["kind"],
    )
    calls = CounterMetricFamily(
        "jpushare_executor_calls_failed",
        "executor calls of the dispatcher that raised, by call (submit = sbatch, ...)",
        labels=["call"],
    )
    last_ok = GaugeMetricFamily(
        "jpushare_dispatcher_last_success_timestamp_seconds",
        "when a dispatcher cycle last succeeded (Unix time; 0: never)",
    )
    interval = GaugeMetricFamily(
        "jpushare_dispatcher_cycle_interval_seconds", "the dispatcher's cycle length"
    )
    leader = GaugeMetricFamily(
        "jpushare_dispatcher_leader", "1 for the holder of the dispatcher lease", labels=["holder"]
    )
    expires = GaugeMetricFamily(
        "jpushare_dispatcher_lease_expires_timestamp_seconds", "when the lease runs out"
    )
    epoch = GaugeMetricFamily("jpushare_dispatcher_lease_epoch", "leaderships so far")
    requeued = CounterMetricFamily(
        "jpushare_jobs_requeued", "attempts that ended in a requeue, by cause", labels=["cause"]
    )
    oldest = GaugeMetricFamily(
        "jpushare_oldest_queued_job_wait_seconds", "how long the longest-waiting job has waited"
    )
    foreign = GaugeMetricFamily(
        "jpushare_gpus_foreign", "GPUs in use by jobs outside JPU-Share, per tier", labels=["tier"]
    )
    if f is not None:
        h = f.health
        ok.add_metric([], h.cycles_ok)
        for kind in sorted({*CYCLE_FAILURE_KINDS, *h.cycles_failed}):
            failed.add_metric([kind], h.cycles_failed.get(kind, 0))
        for call in sorted({*EXECUTOR_CALLS, *h.executor_failed}):
            calls.add_metric([call], h.executor_failed.get(call, 0))
        last_ok.add_metric([], h.last_ok_at.timestamp() if h.last_ok_at is not None else 0.0)
        if h.cycle_s is not None:
            interval.add_metric([], h.cycle_s)
        lease = f.lease
        if lease is not None:
            epoch.add_metric([], lease.epoch)
            if lease.holder is not None:
                leader.add_metric([lease.holder], 1)
            if lease.expires_at is not None:
                expires.add_metric([], lease.expires_at.timestamp())
        for cause in sorted({*REQUEUE_CAUSES, *f.requeues}):
            requeued.add_metric([cause], f.requeues.get(cause, 0))
        waited = 0.0
        if f.oldest_queued_at is not None and f.now is not None:
            waited = max(0.0, (f.now - f.oldest_queued_at).total_seconds())
        oldest.add_metric([], waited)
        for tier, n in sorted(f.foreign_gpus.items()):
            foreign.add_metric([tier], n)
    yield from (ok, failed, calls, last_ok, interval, leader, expires, epoch)
    yield from (requeued, oldest, foreign)


def _bound(b: float) -> str:
    return str(int(b)) if b == int(b) else str(b)


@dataclass(frozen=True, slots=True)
class BackfillFigures:
    """The LLM backfill figures (module docstring), as the keeper's files hold them."""

    servers: int
    reserved_gpu_s: float
    idle_served_gpu_s: float
    idle_gpu_s: float
    yields: int
    yield_seconds_sum: float
    yield_seconds_max: float
    killed: int


class BackfillCollector(Collector):
    """Reads `BackfillFigures` on every scrape (a few small files, no database)."""

    def __init__(self, read: Callable[[], BackfillFigures]) -> None:
        self._read = read

    def describe(self) -> Iterable[Metric]:
        return []  # registering must not read the files

    def collect(self) -> Iterable[Metric]:
        try:
            f = self._read()
        except Exception:
            log.exception("metrics: the backfill figures could not be read")
            return []
        servers = GaugeMetricFamily("jpushare_backfill_servers", "backfill servers running")
        servers.add_metric([], f.servers)
        served = CounterMetricFamily(
            "jpushare_backfill_gpu_seconds",
            "GPU-seconds LLM backfill served, on reserved or on idle GPUs",
            labels=["on"],
        )
        served.add_metric(["reserved"], f.reserved_gpu_s)
        served.add_metric(["idle"], f.idle_served_gpu_s)
        idle = CounterMetricFamily(
            "jpushare_idle_gpu_seconds", "GPU-seconds with no research job and no backfill"
        )
        idle.add_metric([], f.idle_gpu_s)
        latency = SummaryMetricFamily(
            "jpushare_backfill_yield_seconds",
            "from a dispatch to its GPUs free of backfill servers",
            count_value=f.yields,
            sum_value=f.yield_seconds_sum,
        )
        worst = GaugeMetricFamily("jpushare_backfill_yield_seconds_max", "the slowest yield")
        worst.add_metric([], f.yield_seconds_max)
        killed = CounterMetricFamily(
            "jpushare_backfill_yields_killed", "backfill servers killed after their grace"
        )
        killed.add_metric([], f.killed)
        return [servers, served, idle, latency, worst, killed]


class ServiceMetrics:
    """One process's metrics registry; see the module docstring for the dispatcher hook."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.dispatch_cycle_seconds = Histogram(
            "jpushare_dispatch_cycle_seconds",
            "one dispatcher cycle: observe, snapshot, decide, record, act",
            buckets=DISPATCH_CYCLE_BUCKETS_S,
            registry=self.registry,
        )
        self.notifications = Counter(
            "jpushare_notifications",
            "notifications by channel (mail, webhook) and outcome (sent, failed_try: one try "
            "failed, given_up: not delivered, no_address: mail without an address)",
            ["channel", "outcome"],
            registry=self.registry,
        )
        self._figures: FiguresCollector | None = None
        self._backfill: BackfillCollector | None = None

    def observe_dispatch_cycle(self, seconds: float) -> None:
        """Record one dispatcher cycle's duration (the dispatcher's hook)."""
        self.dispatch_cycle_seconds.observe(max(0.0, seconds))

    def count_notification(self, channel: str, outcome: str) -> None:
        """One notification's outcome (the notifier's hook, `notify.channels`)."""
        self.notifications.labels(channel, outcome).inc()

    def collect_figures_from(self, read: Callable[[], MetricFigures]) -> None:
        """Export the database figures, read by `read` on each scrape (once per registry)."""
        if self._figures is not None:
            self.registry.unregister(self._figures)
        self._figures = FiguresCollector(read)
        self.registry.register(self._figures)

    def collect_backfill_from(self, read: Callable[[], BackfillFigures]) -> None:
        """Export the LLM backfill figures, read by `read` on each scrape (once per registry)."""
        if self._backfill is not None:
            self.registry.unregister(self._backfill)
        self._backfill = BackfillCollector(read)
        self.registry.register(self._backfill)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)
