"""JPUSHARE_PLACEMENT in the API: "why" shows the placement the dispatcher will choose and
lists the fit placements in the same dispatch order (SPEC §1)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare.policy import PlacementOrder
from tests.api.conftest import ApiWorld, make_world


@pytest.fixture(params=list(PlacementOrder), ids=lambda o: o.value)
def world(
    request: pytest.FixtureRequest,
    sessions: sessionmaker[Session],
) -> Iterator[tuple[ApiWorld, PlacementOrder]]:
    order: PlacementOrder = request.param
    for api in make_world(sessions, placement_order=order):
        yield api, order


def test_why_names_the_placement_of_the_configured_order_and_lists_in_that_order(
    world: tuple[ApiWorld, PlacementOrder],
) -> None:
    api, order = world
    # node-b/rtx4090: 1 of 4 busy (3 idle); node-c/rtx4090: 4 idle; node-c/rtx5090 all busy.
    api.busy = {("node-b", "rtx4090"): 1, ("node-c", "rtx5090"): 4, ("node-a", "rtx3080ti"): 4}
    job = api.submit("alice", 1, min_tier="rtx4090")

    r = api.get(f"/v1/jobs/{job}/why")
    assert r.status_code == 200, r.text
    body = r.json()
    listed = [(p["node"], p["tier"], p["idle"]) for p in body["placements"]]
    # The 5090s come first (strongest tier) though none is idle; inside the 4090s pack
    # takes the fewest idle GPUs that hold the job (node-b, 3), spread the most (node-c, 4).
    if order is PlacementOrder.PACK:
        assert body["dispatch"] == {"node": "node-b", "tier": "rtx4090", "num_gpus": 1}
        assert listed == [
            ("node-c", "rtx5090", 0),
            ("node-b", "rtx4090", 3),
            ("node-c", "rtx4090", 4),
        ]
    else:
        assert body["dispatch"] == {"node": "node-c", "tier": "rtx4090", "num_gpus": 1}
        assert listed == [
            ("node-c", "rtx5090", 0),
            ("node-c", "rtx4090", 4),
            ("node-b", "rtx4090", 3),
        ]
