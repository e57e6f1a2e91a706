"""Small clusters and traces built in code for the simulator tests."""

from __future__ import annotations

import random
from collections.abc import Iterable

from jpushare.formats.cluster_file import ClusterSpec, NodeEvent
from jpushare.formats.trace_file import TraceJob
from jpushare.policy.model import Placement, Tier
from jpushare.vocabulary import NodeState

WEAK = Tier("weak", 10.0, 10)
MID = Tier("mid", 20.0, 20)
STRONG = Tier("strong", 40.0, 30)


def cluster(
    *nodes: tuple[str, dict[str, int]],
    tiers: Iterable[Tier] = (WEAK, MID, STRONG),
    labs: dict[str, float] | None = None,
    events: Iterable[NodeEvent] = (),
) -> ClusterSpec:
    """`cluster(("n1", {"mid": 4}), ...)`: one placement per (node, tier)."""
    placements = sorted(
        (Placement(node, tier, n) for node, gpus in nodes for tier, n in gpus.items()),
        key=lambda p: p.key,
    )
    return ClusterSpec(
        tuple(tiers),
        tuple(placements),
        dict(labs or {}),
        tuple(sorted(events, key=lambda e: e.time)),
    )


def job(
    job_id: str,
    submit: float,
    duration: float,
    gpus: int = 1,
    lab: str = "L",
    *,
    min_tier: str | None = None,
    cancel: float | None = None,
    oom_on: Iterable[str] = (),
    time_limit: float | None = None,
) -> TraceJob:
    return TraceJob(
        job_id, submit, duration, gpus, lab, min_tier, cancel, frozenset(oom_on), time_limit
    )


def random_case(seed: int) -> tuple[ClusterSpec, list[TraceJob]]:
    """A small busy cluster and a trace with multi-GPU jobs, OOMs, cancels and node events."""
    rng = random.Random(seed)
    nodes = [
        ("n1", {"mid": 4}),
        ("n2", {"strong": 4, "mid": 2}),
        ("n3", {"weak": 2}),
        ("n4", {"strong": 2}),
    ]
    events = []
    for _ in range(rng.randrange(0, 3)):
        node = rng.choice(["n1", "n2", "n3", "n4"])
        down = float(rng.randrange(0, 3000))
        events += [
            NodeEvent(down, node, NodeState.DOWN),
            NodeEvent(down + rng.randrange(10, 900), node, NodeState.UP),
        ]
    c = cluster(*nodes, labs={"A": float(rng.randrange(0, 5000)), "B": 0.0}, events=events)
    jobs = []
    for i in range(rng.randrange(15, 40)):
        submit = float(rng.randrange(0, 3000))
        duration = float(rng.randrange(1, 900))
        cancel = submit + rng.randrange(0, 1500) if rng.random() < 0.15 else None
        oom = (
            rng.sample(["weak", "mid", "strong"], rng.randrange(0, 3)) if rng.random() < 0.2 else []
        )
        jobs.append(
            job(
                f"j{i:02d}",
                submit,
                duration,
                rng.choice([1, 1, 1, 2, 2, 3, 4, 4, 6]),
                rng.choice(["A", "B", "C"]),
                min_tier=rng.choice([None, None, None, "mid", "strong"]),
                cancel=cancel,
                oom_on=oom,
                time_limit=duration * rng.choice([0.5, 1.0, 1.5, 3.0]),  # 0.5: overruns
            )
        )
    return c, jobs
