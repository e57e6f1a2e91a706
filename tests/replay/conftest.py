"""A real `jpushare serve --demo` for the replay tests: SQLite, a short cycle, and the local
executor or the Slurm executor on the fake cluster (examples/slurm-cluster.yaml either way,
so both replay the same inventory the simulator sees)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.dispatcher.processes import REPO, Service
from tests.service.demo_service import demo_service

CLUSTER = REPO / "examples" / "slurm-cluster.yaml"
TRACE = REPO / "tests" / "replay" / "fidelity-trace.csv"


@dataclass(frozen=True)
class Running:
    url: str
    admin_token: str
    user_token: str
    service: Service


def serve(tmp_path: Path, cycle_s: float, **extra: str) -> Iterator[Running]:
    """`serve --demo` on a fresh state directory until the block ends."""
    with demo_service(
        tmp_path,
        "serve",
        cycled=True,
        JPUSHARE_CLUSTER=str(CLUSTER),
        JPUSHARE_CYCLE_S=str(cycle_s),
        **extra,
    ) as demo:
        tokens = demo.tokens
        yield Running(
            demo.url, tokens["JPUSHARE_TOKEN_ADMIN"], tokens["JPUSHARE_TOKEN"], demo.service
        )
