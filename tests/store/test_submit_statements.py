"""The submit path's statements: what POST /v1/jobs costs the database, on both backends.

`store.submit` reads the user, the tiers and the placement capacities in one statement and
writes the job with its `submitted` event in one (PostgreSQL) or two (SQLite); its record
is exactly what `get_job` reads back, and `authenticate` is one statement.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from jpushare import store
from tests.store.conftest import T0, World


@contextmanager
def statements(world: World) -> Iterator[list[str]]:
    """The SQL statements the world's engine runs inside the block (BEGIN left out)."""
    bind = world.sessions.kw["bind"]
    seen: list[str] = []

    def record(*args: Any) -> None:
        statement = str(args[2])
        if not statement.lstrip().upper().startswith("BEGIN"):
            seen.append(statement)

    event.listen(bind, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(bind, "before_cursor_execute", record)


def test_authenticate_and_submit_take_few_statements_and_return_the_stored_job(
    world: World,
) -> None:
    with world.sessions.begin() as s:
        secret = store.issue_token(s, world.alice.id, T0).secret
    with world.sessions.begin() as s, statements(world) as seen:
        user = store.authenticate(s, secret)
        assert user == world.alice
        assert len(seen) == 1
        done = store.submit(
            s,
            user_id=user.id,
            name="",
            command="python train.py --lr 3e-4",
            num_gpus=2,
            now=T0,
            min_tier="rtx4090",
            time_limit_s=3600,
        )
        postgres = s.get_bind().dialect.name == "postgresql"
        assert len(seen) == 1 + (2 if postgres else 3), seen
        assert done.job == store.get_job(s, done.job.id)
        assert done.job.name == "python"
        assert done.tier_names_by_sort_order == {10: "rtx3080ti", 20: "rtx4090", 30: "rtx5090"}
        (submitted,) = store.job_history(s, done.job.id)
        assert submitted.kind == "submitted" and submitted.to_state == "GLOBAL_QUEUE_WAIT"
        assert submitted.at == T0
        assert submitted.detail == {
            "num_gpus": 2,
            "min_tier": "rtx4090",
            "minimum_tier_sort_order": 20,
            "fit_placements": 3,  # node-b and node-c rtx4090, node-c rtx5090
        }
