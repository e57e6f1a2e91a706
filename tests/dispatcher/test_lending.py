"""The lending option in the real dispatcher cycle (in-memory executor, a real HTTP router):
a job started on lent GPUs is recorded with its lender, and the LLM router is told to
yield there before it starts, as for any dispatch (SPEC §6)."""

from __future__ import annotations

from jpushare.dispatcher.cycle import CycleDeps, run_cycle
from jpushare.llm_router import HttpRouter
from jpushare.policy.options import ReservedGpus, TopJob
from jpushare.policy.peers import named_policy
from tests.cycle_rig import MemoryRig
from tests.dispatcher.test_cycle import CallOrder, RecordingRouter, llm_router  # noqa: F401

LEND = named_policy("reservation", TopJob.FIRST_WAITING, ReservedGpus.LEND_BY_LIMIT)


def test_a_lent_dispatch_tells_the_router_to_yield_before_it_starts(
    rig: MemoryRig,
    llm_router: RecordingRouter,  # noqa: F811 (the fixture)
) -> None:
    router = HttpRouter(llm_router.url)
    both = CallOrder(router, rig.executor)
    deps = CycleDeps(rig.sessions, both, both, policy=LEND)
    # node-a has 2 x 4090: `long` (limit 10 min) takes one, `big` (2) reserves the other,
    # `short` (limit 1 min) ends by the projected fill and borrows it.
    long = rig.submit("alice", 1, rig.hold("long").command, min_tier="rtx4090", time_limit_s=600)
    assert run_cycle(deps).dispatched.started == (long,)
    big = rig.submit("bob", 2, min_tier="rtx4090", time_limit_s=3600)
    short = rig.submit("bob", 1, rig.hold("short").command, min_tier="rtx4090", time_limit_s=60)
    report = run_cycle(deps)
    assert report.dispatched.started == (short,)
    assert both.calls[-2:] == [f"yield {short}", f"submit {short}"]
    assert router.flush(30.0)
    assert llm_router.bodies[-1] == {
        "path": "/v1/yield",
        "node": "node-a",
        "tier": "rtx4090",
        "num_gpus": 1,
        "job_id": str(short),
    }
    lent = rig.job(short)
    assert lent.lent_from_job_id == big and lent.lent_until is not None
    assert rig.job(big).reserved_gpus == 1
    router.close()
