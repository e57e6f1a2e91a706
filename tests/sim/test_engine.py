"""The simulator's engine: job life (REJECTED, OOM, cancel, node events), time and accounting."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from jpushare.formats.cluster_file import NodeEvent
from jpushare.policy.decide import RankedQueue, decide, queue_order
from jpushare.policy.model import Decisions, QueuedJob, ReleaseReason, Snapshot
from jpushare.policy.order import IndexedPlacements, PlacementOrder
from jpushare.policy.peers import POLICIES
from jpushare.sim.engine import (
    Attempt,
    AttemptEnd,
    SimResult,
    TraceJobResult,
    TraceJobState,
    simulate,
)
from jpushare.sim.report import jobs_csv
from jpushare.vocabulary import NodeState
from tests.sim.builders import cluster, job, random_case


def by_id(result: SimResult) -> dict[str, TraceJobResult]:
    return {j.job_id: j for j in result.jobs}


def test_a_job_no_placement_can_hold_is_rejected_and_the_rest_run() -> None:
    c = cluster(("n1", {"mid": 4}))
    r = by_id(
        simulate(
            c,
            [job("big", 0, 10, 8), job("strong", 0, 10, 1, min_tier="strong"), job("ok", 0, 10, 4)],
        )
    )
    assert r["big"].state is TraceJobState.REJECTED
    assert r["big"].attempts == ()
    assert "largest fit is 4" in r["big"].reason
    assert r["strong"].state is TraceJobState.REJECTED
    assert "num_gpus=1 at tier >= strong" in r["strong"].reason
    assert r["ok"].state is TraceJobState.COMPLETED
    assert r["ok"].wait_s == 0


def test_an_oom_job_is_charged_then_retries_on_a_stronger_tier_and_completes() -> None:
    c = cluster(("nw", {"weak": 1}), ("ns", {"strong": 1}))
    seen: list[QueuedJob] = []

    def observe(snapshot: Snapshot, decisions: Decisions) -> None:
        seen.extend(j for j in snapshot.queue if j.job_id == "b" and snapshot.now > 0)

    result = simulate(c, [job("a", 0, 100), job("b", 0, 50, oom_on=["weak"])], observer=observe)
    b = by_id(result)["b"]
    assert b.state is TraceJobState.COMPLETED
    assert b.attempts == (
        Attempt(0.0, 50.0, "nw", "weak", 1, AttemptEnd.OOM, 500.0),
        Attempt(100.0, 150.0, "ns", "strong", 1, AttemptEnd.COMPLETED, 2000.0),
    )
    assert (b.run_cost, b.billed, b.wait_s) == (2500.0, 2500.0, 0.0)
    # Requeued keeping its queue entry time, with the minimum raised past "weak" (to "mid").
    assert seen and all(q.queue_entered_at == 0.0 and q.min_sort_order == 20 for q in seen)
    assert result.lab_usage == {"L": 100 * 40.0 + 2500.0}


def test_an_oom_on_the_strongest_tier_fails_the_job_after_charging_the_attempt() -> None:
    c = cluster(("ns", {"strong": 2}))
    result = simulate(c, [job("b", 0, 30, oom_on=["strong"])])
    b = by_id(result)["b"]
    assert b.state is TraceJobState.FAILED
    assert "no stronger auto-assign tier" in b.reason
    assert [a.outcome for a in b.attempts] == [AttemptEnd.OOM]
    assert b.billed == 30 * 40.0
    assert result.lab_usage["L"] == 30 * 40.0


def test_an_oom_whose_next_tier_cannot_hold_the_job_fails() -> None:
    c = cluster(("nw", {"weak": 4}), ("nm", {"mid": 2}))
    b = by_id(simulate(c, [job("b", 0, 10, 4, oom_on=["weak"])]))["b"]
    assert b.state is TraceJobState.FAILED
    assert "no placement at tier >= mid can hold num_gpus=4" in b.reason


def test_a_queued_job_cancelled_never_starts_and_costs_nothing() -> None:
    c = cluster(("n1", {"mid": 1}))
    r = by_id(simulate(c, [job("a", 0, 100), job("b", 0, 10, cancel=40)]))
    assert r["b"].state is TraceJobState.CANCELLED
    assert r["b"].attempts == ()
    assert (r["b"].run_cost, r["b"].reservation_cost, r["b"].billed) == (0.0, 0.0, 0.0)


def test_a_job_cancelled_while_reserving_releases_and_pays_for_its_reservation() -> None:
    c = cluster(("n1", {"mid": 4}))
    result = simulate(c, [job("a", 0, 100, 2), job("b", 0, 10, 4, cancel=62)])
    b = by_id(result)["b"]
    assert b.state is TraceJobState.CANCELLED
    # a starts at t=0, so b, the first job that cannot, is the top job in that same cycle
    # (SPEC decision 7) and reserves the 2 idle GPUs.
    assert [(r.job_id, r.gpus, r.since, r.ended_at, r.reason) for r in result.reservations] == [
        ("b", 2, 0.0, 62.0, ReleaseReason.CANCEL)
    ]
    assert b.reservation_cost == 2 * 62 * 20.0
    assert b.billed == b.reservation_cost
    assert result.lab_usage["L"] == 2 * 100 * 20.0 + 2 * 62 * 20.0
    # Read literally (queue[0] at the start of a cycle), b is the top job only at t=5.
    literal = simulate(
        c, [job("a", 0, 100, 2), job("b", 0, 10, 4, cancel=62)], top_job="first-queued"
    )
    assert [(r.since, r.ended_at) for r in literal.reservations] == [(5.0, 62.0)]


def test_a_running_job_cancelled_stops_then_and_frees_its_gpus_at_the_next_cycle() -> None:
    c = cluster(("n1", {"mid": 2}))
    r = by_id(simulate(c, [job("a", 0, 100, 2, cancel=33), job("b", 10, 10)]))
    assert r["a"].state is TraceJobState.CANCELLED
    assert r["a"].attempts == (
        Attempt(0.0, 33.0, "n1", "mid", 2, AttemptEnd.CANCELLED, 2 * 33 * 20.0),
    )
    assert (r["b"].last.start, r["b"].last.end) == (35.0, 45.0)  # type: ignore[union-attr]


def test_a_job_cancelled_before_any_cycle_saw_it_is_never_queued() -> None:
    c = cluster(("n1", {"mid": 2}))
    r = by_id(simulate(c, [job("b", 7, 10, cancel=8)]))
    assert r["b"].state is TraceJobState.CANCELLED
    assert r["b"].attempts == ()


def test_a_node_failure_sends_its_running_jobs_back_to_the_queue_without_escalation() -> None:
    c = cluster(
        ("n1", {"strong": 2}),
        ("n2", {"mid": 2}),
        events=[NodeEvent(42, "n1", NodeState.DOWN), NodeEvent(300, "n1", NodeState.UP)],
    )
    result = simulate(c, [job("a", 0, 200, 2), job("b", 100, 10, 2, min_tier="strong")])
    r = by_id(result)
    assert r["a"].attempts == (
        Attempt(0.0, 42.0, "n1", "strong", 2, AttemptEnd.NODE_DOWN, 2 * 42 * 40.0),
        Attempt(45.0, 245.0, "n2", "mid", 2, AttemptEnd.COMPLETED, 2 * 200 * 20.0),
    )
    assert r["a"].state is TraceJobState.COMPLETED
    assert r["a"].wait_s == 0.0  # first start minus submission
    # b needs the strong tier: it waits for n1 to come back.
    assert r["b"].attempts[0].start == 300.0
    assert r["b"].wait_s == 200.0
    ups = [(s.t, s.up) for s in result.gpu_timeline]
    assert (42.0, 2) in ups and (300.0, 4) in ups


def test_a_node_failure_releases_the_reservation_on_it_by_r5() -> None:
    c = cluster(
        ("n1", {"strong": 4}),
        events=[NodeEvent(100, "n1", NodeState.DOWN), NodeEvent(200, "n1", NodeState.UP)],
    )
    result = simulate(c, [job("x", 0, 500, 2), job("y", 0, 10, 4)])
    first = result.reservations[0]
    assert (first.job_id, first.gpus, first.since, first.ended_at, first.reason) == (
        "y",
        2,
        0.0,  # x starts at t=0: y is the top job in the same cycle (SPEC decision 7)
        100.0,
        ReleaseReason.R5,
    )
    x = by_id(result)["x"]
    assert [a.outcome for a in x.attempts] == [AttemptEnd.NODE_DOWN, AttemptEnd.COMPLETED]
    assert x.attempts[1].start == 200.0


def test_events_between_cycles_apply_at_the_next_cycle_but_keep_their_own_time() -> None:
    c = cluster(("n1", {"mid": 1}))
    r = by_id(simulate(c, [job("a", 1, 12), job("b", 2, 5)], cycle_s=5))
    assert (r["a"].last.start, r["a"].last.end) == (5.0, 17.0)  # type: ignore[union-attr]
    assert (r["b"].last.start, r["b"].last.end) == (20.0, 25.0)  # type: ignore[union-attr]
    assert r["b"].wait_s == 18.0


@pytest.mark.parametrize("cycle_s", [5.0, 0.7])  # 0.7: cycle times are inexact floats
@pytest.mark.parametrize("placement", list(PlacementOrder))
@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("seed", range(8))
def test_skipping_idle_cycles_gives_exactly_the_result_of_running_every_cycle(
    policy: str, seed: int, placement: PlacementOrder, cycle_s: float
) -> None:
    c, jobs = random_case(seed)
    skipped = simulate(c, jobs, policy, cycle_s, placement=placement)
    every = simulate(c, jobs, policy, cycle_s, placement=placement, every_cycle=True)
    assert jobs_csv(skipped) == jobs_csv(every)
    assert skipped.jobs == every.jobs
    assert skipped.lab_usage == every.lab_usage
    assert skipped.reservations == every.reservations
    assert skipped.gpu_timeline == every.gpu_timeline
    assert skipped.cycles_run < every.cycles_run == every.cycles_total


def test_the_cost_follows_the_events_not_the_simulated_time() -> None:
    c = cluster(("n1", {"mid": 1}))
    result = simulate(c, [job("a", 0, 10), job("b", 10 * 86400, 10)])
    assert result.cycles_total > 10 * 86400 / 5
    assert result.cycles_run <= 6


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("seed", range(8))
def test_usage_is_conserved_every_gpu_second_reaches_its_lab_once(policy: str, seed: int) -> None:
    c, jobs = random_case(seed)
    result = simulate(c, jobs, policy)
    tflops = {t.name: t.tflops for t in c.tiers}
    grown = sum(result.lab_usage.values()) - sum(result.initial_lab_usage.values())
    assert grown == pytest.approx(sum(j.billed for j in result.jobs), rel=1e-12)
    for j in result.jobs:
        assert j.state is not TraceJobState.QUEUED and j.state is not TraceJobState.RUNNING
        assert j.billed == pytest.approx(j.run_cost + j.reservation_cost, rel=1e-12)
        ran = sum(a.num_gpus * (a.end - a.start) * tflops[a.tier] for a in j.attempts)
        assert j.run_cost == pytest.approx(ran, rel=1e-12)
    per_lab = {lab: result.initial_lab_usage[lab] for lab in result.lab_usage}
    for j in result.jobs:
        per_lab[j.lab] += j.billed
    assert per_lab == pytest.approx(result.lab_usage, rel=1e-12)
    if policy != "reservation":
        assert result.reservations == ()
        assert all(j.reservation_cost == 0 for j in result.jobs)


@pytest.mark.parametrize("seed", range(8))
def test_reservation_costs_match_the_policys_own_accruals(seed: int) -> None:
    """The engine costs reservations per span; decide accrues per cycle. Same totals."""
    c, jobs = random_case(seed)
    tflops = {t.name: t.tflops for t in c.tiers}
    accrued: dict[str, float] = {}

    def observe(snapshot: Snapshot, decisions: Decisions) -> None:
        for a in decisions.accruals:
            accrued[a.job_id] = accrued.get(a.job_id, 0.0) + a.tflop_s

    result = simulate(c, jobs, "reservation", every_cycle=True, observer=observe)
    assert result.reservations, "the case should exercise reservations"
    # A cancel releases between cycles: the piece since the last cycle is the engine's.
    for r in result.reservations:
        if r.reason is ReleaseReason.CANCEL:
            assert r.ended_at is not None
            last_cycle = (math.ceil(r.ended_at / 5) - 1) * 5.0
            piece = r.gpus * (r.ended_at - max(last_cycle, r.since)) * tflops[r.tier]
            accrued[r.job_id] = accrued.get(r.job_id, 0.0) + piece
    for j in result.jobs:
        assert j.reservation_cost == pytest.approx(accrued.get(j.job_id, 0.0), rel=1e-9, abs=1e-6)


def test_the_engine_applies_exactly_what_decide_returns_for_the_reservation_policy() -> None:
    c, jobs = random_case(3)
    checked = 0

    def observe(snapshot: Snapshot, decisions: Decisions) -> None:
        nonlocal checked
        again = decide(snapshot)
        assert (again.order, again.actions, again.accruals) == (
            decisions.order,
            decisions.actions,
            decisions.accruals,
        )
        checked += 1

    named = simulate(c, jobs, "reservation", observer=observe)
    assert checked == named.cycles_run > 0
    assert simulate(c, jobs, decide).jobs == named.jobs


@pytest.mark.parametrize("policy", list(POLICIES))
def test_no_placement_ever_holds_more_than_its_capacity(policy: str) -> None:
    c, jobs = random_case(5)

    def observe(snapshot: Snapshot, decisions: Decisions) -> None:
        reserved: dict[tuple[str, str], int] = {}
        holders = [q for q in snapshot.queue if q.reservation is not None]
        for q in holders:
            assert q.reservation is not None
            key = (q.reservation.node, q.reservation.tier)
            reserved[key] = reserved.get(key, 0) + q.reservation.gpus
        assert len(holders) <= 1
        for p in snapshot.placements:
            assert p.busy + reserved.get(p.key, 0) <= p.capacity
            if not p.schedulable:
                assert p.busy == 0

    simulate(c, jobs, policy, observer=observe)


def test_a_job_that_can_never_start_again_ends_the_replay_queued() -> None:
    c = cluster(
        ("n1", {"strong": 2}), ("n2", {"mid": 2}), events=[NodeEvent(10, "n1", NodeState.DOWN)]
    )
    result = simulate(c, [job("a", 0, 100), job("b", 20, 10, min_tier="strong")])
    r = by_id(result)
    assert r["a"].state is TraceJobState.COMPLETED and r["a"].attempts[-1].node == "n2"
    assert r["b"].state is TraceJobState.QUEUED
    assert r["b"].attempts == ()


def test_bad_api_input_is_refused() -> None:
    c = cluster(("n1", {"mid": 1}))
    with pytest.raises(ValueError, match="min_tier 'huge' is not a tier"):
        simulate(c, [job("a", 0, 1, min_tier="huge")])
    with pytest.raises(ValueError, match="unique"):
        simulate(c, [job("a", 0, 1), job("a", 1, 1)])
    with pytest.raises(ValueError, match="unknown policy 'lifo'"):
        simulate(c, [], "lifo")
    with pytest.raises(ValueError, match="cycle_s must be > 0"):
        simulate(c, [], "fifo", 0)


@pytest.mark.parametrize("placement", list(PlacementOrder))
@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("seed", range(4))
def test_the_engines_kept_index_and_ranked_queue_decide_as_plain_tuples_do(
    policy: str, placement: PlacementOrder, seed: int
) -> None:
    # The engine hands each cycle its placements with an idle index it keeps up to date
    # (IndexedPlacements), its queue already ranked (RankedQueue) and its running jobs with
    # their expected ends per placement (IndexedRunning); the same snapshot with plain
    # tuples, the queue reversed, must decide the same.
    c, jobs = random_case(seed)
    checked = 0

    def observe(snapshot: Snapshot, decisions: Decisions) -> None:
        nonlocal checked
        assert isinstance(snapshot.placements, IndexedPlacements)
        assert isinstance(snapshot.queue, RankedQueue)
        plain = replace(
            snapshot,
            placements=tuple(snapshot.placements),
            queue=tuple(reversed(snapshot.queue)),
            running=tuple(snapshot.running),
        )
        assert type(plain.placements) is tuple and type(plain.queue) is tuple
        assert list(snapshot.queue) == sorted(plain.queue, key=queue_order(plain.lab_usage))
        assert snapshot.queue.job_ids == tuple(q.job_id for q in snapshot.queue)
        again = POLICIES[policy](plain, placement)
        assert again == decisions  # order, actions, accruals and every "why"
        checked += 1

    result = simulate(c, jobs, policy, placement=placement, observer=observe)
    assert checked == result.cycles_run > 0
