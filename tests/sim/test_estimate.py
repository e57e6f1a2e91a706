"""Start estimates: the engine run forward from a live state, and run times from history."""

from __future__ import annotations

import random

import pytest

from jpushare.api.estimates import job_estimate
from jpushare.policy.model import (
    Decisions,
    Placement,
    QueuedJob,
    Reservation,
    RunningJob,
    Snapshot,
    Tier,
)
from jpushare.sim.engine import forecast, simulate
from jpushare.sim.estimate import (
    DEFAULT_RUN_S,
    EstimateBasis,
    JobOwner,
    PastRun,
    RunHistory,
    estimate_starts,
)
from tests.sim.builders import cluster, job

A = Tier("a", 10.0, 10)
NOW = 1000.0


def snapshot(
    queue: tuple[QueuedJob, ...],
    running: tuple[RunningJob, ...],
    busy: int | None = None,
    usage: dict[str, float] | None = None,
) -> Snapshot:
    held = sum(r.num_gpus for r in running)
    place = Placement("n1", "a", 4, held if busy is None else busy)
    return Snapshot((A,), (place,), queue, usage or {"L": 0.0, "M": 0.0}, NOW, running)


def test_a_big_job_starts_when_the_last_running_job_reaches_its_limit() -> None:
    running = (RunningJob("1", "n1", "a", 2, NOW - 100), RunningJob("2", "n1", "a", 2, NOW - 10))
    queue = (QueuedJob("3", "L", 4, 10, NOW - 50), QueuedJob("4", "L", 2, 10, NOW - 40))
    run_s = {"1": 300.0, "2": 900.0, "3": 600.0, "4": 60.0}
    fc = forecast(snapshot(queue, running), run_s, running_labs={"1": "L", "2": "L"})
    # Job 1 ends at NOW+200, job 2 at NOW+890: the top job 3 reserves job 1's GPUs (job 4,
    # behind it, may not take them) and starts at the first 5 s cycle after NOW+890.
    assert fc.starts["3"] == NOW + 890
    assert fc.starts["4"] == NOW + 890 + 600
    assert fc.unresolved == frozenset()


def test_gpus_busy_outside_jpushare_never_free_so_the_job_gets_no_estimate() -> None:
    running = (RunningJob("1", "n1", "a", 2, NOW - 100),)
    queue = (QueuedJob("3", "L", 4, 10, NOW - 50),)
    fc = forecast(snapshot(queue, running, busy=3), {"1": 200.0, "3": 60.0})
    assert fc.starts == {}
    assert fc.unresolved == {"3"}


def test_a_running_job_past_its_expected_end_frees_its_gpus_at_once() -> None:
    running = (RunningJob("1", "n1", "a", 4, NOW - 5000),)
    queue = (QueuedJob("3", "L", 2, 10, NOW - 50),)
    fc = forecast(snapshot(queue, running), {"1": 3600.0, "3": 60.0})
    assert fc.starts == {"3": NOW}


def test_a_held_reservation_is_kept_and_filled() -> None:
    running = (RunningJob("1", "n1", "a", 2, NOW - 100),)
    held = Reservation("n1", "a", 2, NOW - 30, NOW - 30)
    queue = (QueuedJob("3", "L", 4, 10, NOW - 50, held), QueuedJob("4", "M", 1, 10, NOW - 60))
    usage = {"L": 0.0, "M": 10.0}
    fc = forecast(snapshot(queue, running, usage=usage), {"1": 200.0, "3": 60.0, "4": 60.0})
    # Job 4 ranks below the top job (its lab used more), so the reserved GPUs stay closed to
    # it: it starts when job 3, which took all four, ends.
    assert fc.starts["3"] == NOW + 100
    assert fc.starts["4"] == NOW + 160


def test_run_times_come_from_the_limit_then_the_user_then_the_lab_then_the_default() -> None:
    history = RunHistory(
        [
            PastRun("ann", "L", 2, 100.0),
            PastRun("ann", "L", 2, 300.0),
            PastRun("ann", "L", 2, 900.0),
            PastRun("bob", "L", 4, 50.0),
            PastRun("bob", "L", 4, 70.0),
        ]
    )
    ann, cy = JobOwner("ann", "L"), JobOwner("cy", "L")
    assert history.estimate(2, ann, 42.0).basis is EstimateBasis.TIME_LIMIT
    assert history.estimate(2, ann, 42.0).run_s == 42.0
    assert history.estimate(2, ann, None).run_s == 300.0  # ann's median of 2-GPU runs
    assert history.estimate(2, ann, None).basis is EstimateBasis.USER_HISTORY
    assert history.estimate(4, cy, None).run_s == 60.0  # L's 4-GPU median (bob's runs)
    assert history.estimate(4, cy, None).basis is EstimateBasis.LAB_HISTORY
    assert history.estimate(8, cy, None).basis is EstimateBasis.DEFAULT
    assert history.estimate(8, None, None).run_s == DEFAULT_RUN_S


def test_only_the_top_of_the_queue_is_forecast_when_it_is_longer_than_the_budget() -> None:
    running = (RunningJob("1", "n1", "a", 4, NOW - 100, 200.0),)
    queue = tuple(QueuedJob(str(10 + i), "L", 1, 10, NOW - 100 + i, None, 60.0) for i in range(6))
    est = estimate_starts(snapshot(queue, running), {}, RunHistory(()), max_jobs=4)
    assert [est.starts[q.job_id] is not None for q in queue] == [True] * 4 + [False] * 2
    assert est.basis["10"] is EstimateBasis.TIME_LIMIT
    assert est.basis["1"] is EstimateBasis.TIME_LIMIT


@pytest.mark.parametrize("seed", range(4))
def test_from_a_replays_state_with_true_run_times_the_forecast_is_the_replay(seed: int) -> None:
    """No arrival after the snapshot and every run time known: the forecast must start every
    queued job exactly when the replay did (same engine, same policy, same state)."""
    rng = random.Random(seed)
    spec = cluster(("n1", {"mid": 4}), ("n2", {"strong": 4, "mid": 2}), ("n3", {"strong": 2}))
    jobs = [
        job(
            f"j{i}",
            rng.randrange(0, 300),
            rng.randrange(30, 2000),
            rng.choice((1, 1, 2, 4)),
            rng.choice(("L", "M", "N")),
        )
        for i in range(40)
    ]
    last_submit = max(j.submit_time for j in jobs)
    seen: list[Snapshot] = []

    def observe(s: Snapshot, _d: Decisions) -> None:
        if s.now >= last_submit and not seen and s.queue:
            seen.append(
                Snapshot(
                    s.tiers,
                    tuple(s.placements),
                    tuple(s.queue),
                    dict(s.lab_usage),
                    s.now,
                    tuple(s.running),
                )
            )

    result = simulate(spec, jobs, "reservation", 5.0, observer=observe)
    assert seen, "the replay had a queue after its last submission"
    snap = seen[0]
    duration = {j.job_id: j.duration for j in jobs}
    labs = {j.job_id: j.lab for j in jobs}
    fc = forecast(snap, duration, running_labs=labs)
    actual = {r.job_id: r.first_start for r in result.jobs}
    assert fc.starts == {q.job_id: actual[q.job_id] for q in snap.queue}


def test_a_running_jobs_remaining_time_conditions_on_how_long_it_has_run() -> None:
    history = RunHistory([PastRun("ann", "L", 2, d) for d in (100.0, 300.0, 900.0)])
    ann = JobOwner("ann", "L")
    # Run 200 s: of ann's runs only 300 and 900 lasted longer; the median of d - t is 400.
    left = history.remaining(2, ann, None, 200.0)
    assert (left.run_s, left.basis) == (400.0, EstimateBasis.USER_HISTORY)
    # Past every run seen: unknown, taken as long again as it has run.
    past = history.remaining(2, ann, None, 1000.0)
    assert (past.run_s, past.basis) == (1000.0, EstimateBasis.UNKNOWN)
    # A limit decides: its remainder.
    limited = history.remaining(2, ann, 600.0, 200.0)
    assert (limited.run_s, limited.basis) == (400.0, EstimateBasis.TIME_LIMIT)
    # A queued job (t = 0) is the whole median.
    assert history.estimate(2, ann, None).run_s == 300.0


def test_a_job_blocked_by_a_run_past_its_users_median_is_not_estimated_at_now() -> None:
    """The old estimate let such a run "end at once", so every job behind it "started now"."""
    history = RunHistory([PastRun("ann", "L", 4, d) for d in (100.0, 200.0, 5000.0)])
    running = (RunningJob("1", "n1", "a", 4, NOW - 1000),)  # past ann's median of 200 s
    queue = (QueuedJob("3", "L", 2, 10, NOW - 50),)
    owners = {"1": JobOwner("ann", "L"), "3": JobOwner("bob", "L")}
    est = estimate_starts(snapshot(queue, running), owners, history)
    assert est.basis["1"] is EstimateBasis.USER_HISTORY
    assert est.starts["3"] == NOW + 4000  # the 5000 s run, the only one longer than 1000 s


def test_no_running_job_ends_before_the_next_cycle() -> None:
    running = (RunningJob("1", "n1", "a", 4, NOW - 5000, 3600.0),)  # past its limit
    queue = (QueuedJob("3", "L", 2, 10, NOW - 50, None, 60.0),)
    est = estimate_starts(snapshot(queue, running), {}, RunHistory(()), cycle_s=5.0)
    start = est.starts["3"]
    assert start is not None and start >= NOW + 5.0
    # A job the next cycle can start is estimated at the snapshot's instant.
    idle = estimate_starts(snapshot(queue, ()), {}, RunHistory(()), cycle_s=5.0)
    assert idle.starts["3"] == NOW


def test_a_reused_forecasts_start_is_never_before_the_request() -> None:
    queue = (QueuedJob("3", "L", 2, 10, NOW - 50, None, 60.0),)
    est = estimate_starts(snapshot(queue, ()), {}, RunHistory(()))
    assert job_estimate(est, "3").start == NOW
    assert job_estimate(est, "3", NOW + 21).start == NOW + 21  # not "21 s ago"
