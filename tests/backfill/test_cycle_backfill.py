"""Whole dispatcher cycles over the local executor with the keeper's servers on its GPUs:
the yield names the job's exact GPUs, the job starts on GPUs no server holds, the other
servers keep serving, and no lab is charged for what the servers did."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from jpushare.backfill.keeper import Keeper
from jpushare.config import BackfillSettings
from jpushare.dispatcher.cycle import CycleDeps
from jpushare.executors.backfill_servers import backfill_dir, load_all
from jpushare.llm_router import HttpRouter
from tests.backfill.rig import free_port_base, stand_in_command
from tests.dispatcher.conftest import LocalRig


@pytest.fixture
def yields() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A lab's own router: records each POST /v1/yield body."""
    bodies: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            bodies.append(json.loads(self.rfile.read(length)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    server.shutdown()
    server.server_close()


def test_a_dispatch_yields_exactly_its_gpus_and_charges_nothing_for_backfill(
    local_rig: LocalRig, yields: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    rig = local_rig
    url, bodies = yields
    markers = tmp_path / "markers"
    markers.mkdir()
    settings = BackfillSettings(
        command=stand_in_command(markers), port_base=free_port_base(3), grace_s=5.0
    )
    keeper = Keeper(rig.executor, settings)
    router = HttpRouter(url)
    rig.deps = CycleDeps(rig.sessions, rig.executor, router)
    try:
        assert len(keeper.tick().started) == 3  # node-a GPUs 0, 1; node-b GPU 0
        for _ in range(3):  # cycles with every GPU serving backfill: nothing to charge
            rig.cycle()
            keeper.tick()
        assert rig.usage("alpha") == 0.0 and rig.usage("beta") == 0.0
        hold = rig.hold("job")
        check = (
            f"for g in ${{JPUSHARE_GPUS//,/ }}; do flock -n {markers}/$JPUSHARE_NODE-gpu$g true "
            '|| { echo "HELD $g"; exit 3; }; done; echo "FREE $JPUSHARE_GPUS"; '
        )
        job = rig.submit("alice", 1, check + hold.command, min_tier="rtx4090")
        rig.cycle_until(rig.state_is(job, "RUNNING"), "the research job runs")
        assert router.flush(30.0)
        assert bodies == [
            {"node": "node-a", "tier": "rtx4090", "num_gpus": 1, "job_id": str(job), "gpus": [0]}
        ]
        assert "FREE 0" in rig.executor.log(str(job), 1)
        left = {r.key for r in load_all(backfill_dir(rig.executor.state_dir))}
        assert left == {"node-a~1-1", "node-b~0-0"}
        keeper.tick()
        assert {r.key for r in load_all(backfill_dir(rig.executor.state_dir))} == left
        hold.release()
        rig.cycle_until(rig.state_is(job, "COMPLETED"), "the research job ends")
        assert rig.usage("beta") == 0.0  # beta ran nothing: the servers are charged to none
    finally:
        keeper.stop_all()
        router.close()
