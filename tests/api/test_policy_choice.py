"""JPUSHARE_POLICY in the API: "why" and the start estimates project the policy the
dispatcher runs, not always SPEC §3's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare.policy import decide
from jpushare.policy.peers import NamedPolicy, fifo
from tests.api.conftest import ApiWorld, make_world

# One GPU busy everywhere: a 4-GPU job fits no placement now, a 1-GPU job fits them all.
ONE_BUSY_EACH = {
    ("node-a", "rtx3080ti"): 1,
    ("node-b", "rtx4090"): 1,
    ("node-c", "rtx4090"): 1,
    ("node-c", "rtx5090"): 1,
}


@pytest.fixture(params=[decide, fifo], ids=["reservation", "fifo"])
def world(
    request: pytest.FixtureRequest, sessions: sessionmaker[Session]
) -> Iterator[tuple[ApiWorld, NamedPolicy]]:
    policy: NamedPolicy = request.param
    for api in make_world(sessions, policy=policy):
        yield api, policy


def test_why_projects_the_configured_policy(world: tuple[ApiWorld, NamedPolicy]) -> None:
    api, policy = world
    api.busy = dict(ONE_BUSY_EACH)
    big = api.submit("bob", 4)
    small = api.submit("bob", 1)

    head = api.get(f"/v1/jobs/{big}/why", "bob").json()
    behind = api.get(f"/v1/jobs/{small}/why", "bob").json()
    actions = [a["action"] for a in head["next_cycle"]]
    if policy is fifo:  # the head blocks the queue and reserves nothing
        assert actions == [] and behind["dispatch"] is None
        # The busy GPUs are foreign (no known end): under fifo the job behind never starts.
        assert behind["estimated_start"] is None
    else:  # SPEC §3: the head reserves, the job behind it starts elsewhere
        assert actions == ["reserve"] and behind["dispatch"] is not None
        assert behind["estimated_start"] is not None
