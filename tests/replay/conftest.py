"""A real `jpushare serve --demo` for the replay tests: SQLite, a short cycle, and the local
executor or the Slurm executor on the fake cluster (examples/slurm-cluster.yaml either way,
so both replay the same inventory the simulator sees)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.dispatcher.conftest import wait_for
from tests.dispatcher.processes import REPO, Service, start_service
from tests.service.test_serve_demo import free_port, read_env_file

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
    port = free_port()
    state = tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JPUSHARE_")}
    env.update(
        JPUSHARE_STATE_DIR=str(state),
        JPUSHARE_CLUSTER=str(CLUSTER),
        JPUSHARE_CYCLE_S=str(cycle_s),
        JPUSHARE_PORT=str(port),
        **extra,
    )
    service = start_service("serve", env, tmp_path, "--demo", cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    tokens = state / "demo-tokens.env"

    def cycled() -> bool:
        assert service.proc.poll() is None, service.log()
        if not tokens.exists():
            return False
        try:
            health = httpx.get(f"{url}/healthz", timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return False
        return bool((health.get("dispatcher") or {}).get("last_success_at"))

    try:
        wait_for(cycled, "the service answers and has run a cycle")
        env_file = read_env_file(tokens)
        yield Running(url, env_file["JPUSHARE_TOKEN_ADMIN"], env_file["JPUSHARE_TOKEN"], service)
    finally:
        service.stop()
