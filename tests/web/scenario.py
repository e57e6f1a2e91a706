"""A small cluster with jobs in every state the dashboard shows, built through the store.

`build_scenario(sessions, clock, extra_busy)` (on a migrated database) leaves:

- node-a (4×3080 Ti) down ("power supply failure"); node-b (4×4090) drained ("disk swap")
  with one GPU busy with a job outside JPU-Share;
- node-c/rtx4090: two GPUs busy outside JPU-Share, two idle (LLM backfill);
- node-c/rtx5090: alice's `llm-finetune` running on two GPUs (time limit 1 h), carol's
  `eval` on one, the last one reserved by the top job, alice's 4-GPU job named
  `<script>alert(1)</script>`;
- queued behind it: bob's `pretrain` (4 GPUs) and `notebook` (1 GPU), both rtx5090;
- ended: alice's `train` and bob's `sweep` (completed, charged, the reservation filled),
  carol's `typo` (cancelled) and bob's `crash` (failed, exit code 1);
- queued outside the fair-share queue: bob's `on-hold` (HELD), alice's `after-finetune`
  (DEPENDENCY: afterok on `llm-finetune`) and carol's array `shard` of three tasks, held
  (`ids["shard"]` is its first task, `ID_0`).

`extra_busy` is what the test's busy-GPU source adds to JPU-Share's own jobs (the foreign
jobs); the function fills it in. Returns the job ids by name and the users' tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.executors.base import NodeState
from jpushare.policy import decide
from jpushare.store.schema import JobState
from tests.api.conftest import ALL_BUSY, Clock, build_world

XSS_NAME = "<script>alert(1)</script>"


@dataclass(frozen=True)
class Scenario:
    jobs: dict[str, int]
    tokens: dict[str, str]


def observed(session: Session, extra: dict[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    """Our jobs' GPUs plus the foreign ones in `extra`."""
    held = store.held_by_jobs(session)
    return {k: held.get(k, 0) + extra.get(k, 0) for k in {*held, *extra}}


def build_scenario(
    sessions: sessionmaker[Session], clock: Clock, extra: dict[tuple[str, str], int]
) -> Scenario:
    tokens, users = build_world(sessions, clock)
    ids: dict[str, int] = {}

    def submit(
        user: str,
        name: str,
        gpus: int,
        min_tier: str | None = None,
        limit_s: float | None = None,
        eligibility: store.Eligibility | None = None,
    ) -> int:
        with sessions.begin() as s:
            done = store.submit(
                s,
                user_id=users[user].id,
                name=name,
                command=f"python {name}.py --epochs 3",
                num_gpus=gpus,
                now=clock(),
                min_tier=min_tier,
                time_limit_s=limit_s,
                eligibility=eligibility,
            )
        ids[name] = done.job.id
        return done.job.id

    def cycle() -> list[int]:
        with sessions.begin() as s:
            decisions = decide(store.load_snapshot(s, clock(), observed(s, extra)))
            recorded = store.record_decisions(s, decisions, clock())
        return [d.job_id for d in recorded.dispatched]

    def run(job: int) -> None:
        with sessions.begin() as s:
            assert store.mark_running(s, job, clock())

    def end(job: int, state: JobState, exit_code: int | None = None) -> None:
        with sessions.begin() as s:
            store.end_job(s, job, state, clock(), exit_code=exit_code)

    # History: only node-c's 5090s are free; bob's 4-GPU job reserves two, fills, runs.
    extra.update(ALL_BUSY)
    extra[("node-c", "rtx5090")] = 0
    train = submit("alice", "train", 2)
    sweep = submit("bob", "sweep", 4)
    assert cycle() == [train]
    run(train)
    clock.advance(5)
    cycle()
    clock.advance(95)
    end(train, JobState.COMPLETED, 0)
    assert cycle() == [sweep]
    run(sweep)
    clock.advance(600)
    end(sweep, JobState.COMPLETED, 0)
    crash = submit("bob", "crash", 1, "rtx5090")
    assert cycle() == [crash]
    run(crash)
    clock.advance(30)
    end(crash, JobState.FAILED, 1)
    typo = submit("carol", "typo", 1)
    with sessions.begin() as s:
        store.cancel_job(s, typo, clock(), reason="cancelled by carol")

    # Now: node-a down, node-b drained, foreign jobs on node-b and node-c/4090.
    clock.advance(1800)
    with sessions.begin() as s:
        store.set_node_state(s, "node-a", NodeState.DOWN, clock(), "power supply failure")
        store.drain_node(s, "node-b", "disk swap", clock())
    extra.clear()
    extra.update({("node-b", "rtx4090"): 1, ("node-c", "rtx4090"): 2})
    finetune = submit("alice", "llm-finetune", 2, "rtx5090", limit_s=3600)
    evaluate = submit("carol", "eval", 1, "rtx5090")
    assert sorted(cycle()) == sorted([finetune, evaluate])
    run(finetune)
    run(evaluate)
    clock.advance(300)
    top = submit("alice", XSS_NAME, 4, "rtx5090")
    clock.advance(60)
    submit("bob", "pretrain", 4, "rtx5090")
    clock.advance(60)
    submit("bob", "notebook", 1, "rtx5090")
    assert cycle() == []  # the top job reserves node-c's idle 5090
    with sessions.begin() as s:
        assert store.get_job(s, top).reserved_gpus == 1
    clock.advance(60)
    # Queued outside the fair-share queue (none of them changes it): held, waiting for a
    # running job to end well, and a held array of three tasks.
    submit("bob", "on-hold", 1, eligibility=store.Eligibility(hold=True))
    after = store.Eligibility(dependency=f"afterok:{finetune}")
    submit("alice", "after-finetune", 1, eligibility=after)
    submit("carol", "shard", 1, eligibility=store.Eligibility(hold=True, array_tasks=(0, 1, 2)))
    clock.advance(60)
    return Scenario(jobs=ids, tokens=tokens)
