"""A local executor with fake GPUs, a backfill keeper over it, and the stand-in server."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from jpushare.backfill.keeper import Keeper
from jpushare.config import BackfillSettings
from jpushare.executors.backfill_servers import ServerRecord, backfill_dir, load_all
from jpushare.executors.base import LaunchSpec, RunInfo
from jpushare.executors.gpus import LocalGpu
from jpushare.executors.local import LocalExecutor
from jpushare.executors.process_groups import group_alive, live_groups
from tests.executors.cgroup_cleanup import remove_cgroups
from tests.executors.contract import wait_for

NODE = "ws1"
WAIT_S = 20.0
STAND_IN = Path(__file__).with_name("stand_in_server.py")


def free_port_base(count: int) -> int:
    """A port such that it and the `count - 1` after it are free now."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + count > 65000:
            continue
        try:
            socks = []
            for p in range(base, base + count):
                t = socket.socket()
                socks.append(t)
                t.bind(("127.0.0.1", p))
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
        return base
    raise RuntimeError("no free port range")


def stand_in_command(markers: Path, *flags: str) -> str:
    extra = " ".join(flags)
    return f"{sys.executable} {STAND_IN} --port {{port}} --markers {markers} {extra}".strip()


def models(port: int) -> dict[str, object] | None:
    """What the server on `port` answers to GET /v1/models (None: nothing answers)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
            data: dict[str, object] = json.loads(r.read())
            return data
    except OSError:
        return None


@dataclass
class BackfillRig:
    state_dir: Path
    markers: Path
    executor: LocalExecutor
    settings: BackfillSettings
    reserved: dict[tuple[str, str], int]

    @classmethod
    def make(cls, tmp: Path, n_gpus: int = 4, **settings: object) -> BackfillRig:
        markers = tmp / "markers"
        markers.mkdir()
        state_dir = tmp / "executor"
        executor = LocalExecutor(
            state_dir, gpus=[LocalGpu(NODE, i, "rtx4090") for i in range(n_gpus)], node=NODE
        )
        flags = settings.pop("flags", ())
        assert isinstance(flags, tuple)
        base = BackfillSettings(
            command=stand_in_command(markers, *flags),
            port_base=free_port_base(n_gpus),
            grace_s=5.0,
            backoff_s=0.0,
            backoff_max_s=0.0,
        )
        return cls(state_dir, markers, executor, replace(base, **settings), {})  # type: ignore[arg-type]

    def keeper(self, clock: Callable[[], float] | None = None) -> Keeper:
        kwargs: dict[str, object] = {"reserved": lambda: dict(self.reserved)}
        if clock is not None:
            kwargs["clock"] = clock
        return Keeper(self.executor, self.settings, **kwargs)  # type: ignore[arg-type]

    @property
    def dir(self) -> Path:
        return backfill_dir(self.state_dir)

    def servers(self) -> dict[str, ServerRecord]:
        return {r.key: r for r in load_all(self.dir)}

    def wait_serving(self, ports: list[int]) -> dict[int, dict[str, object]]:
        out: dict[int, dict[str, object]] = {}
        for p in ports:
            out[p] = wait_for(partial(models, p), WAIT_S, what=f"port {p}")
        return out

    def port(self, index: int) -> int:
        return self.settings.port_base + index // self.settings.gpus_per_server

    def job(self, job_id: str, num_gpus: int, extra: str = "") -> LaunchSpec:
        """A research job that fails (exit 3) if any marker of its GPUs is still held."""
        check = (
            f"for g in ${{JPUSHARE_GPUS//,/ }}; do "
            f"flock -n {self.markers}/$JPUSHARE_NODE-gpu$g true "
            '|| { echo "HELD $g"; exit 3; }; done; echo "FREE $JPUSHARE_GPUS"' + extra
        )
        return LaunchSpec(job_id, 1, job_id, check, NODE, "rtx4090", num_gpus)

    def wait_end(self, job_id: str) -> RunInfo:
        def probe() -> RunInfo | None:
            info = self.executor.find(job_id, 1)
            return info if info is not None and info.state.ended else None

        return wait_for(probe, WAIT_S, what=f"{job_id} to end")

    def cleanup(self) -> None:
        """Leave no process or cgroup behind."""
        for rec in load_all(self.dir):
            cgroup = rec.run_cgroup()
            if cgroup is not None:
                cgroup.kill()
                cgroup.remove()
            if rec.pgid and group_alive(rec.pgid, None, live_groups()):
                os.killpg(rec.pgid, signal.SIGKILL)
        for rec_file in (self.state_dir / "runs").glob("*.json"):
            pgid = json.loads(rec_file.read_text()).get("pgid")
            if pgid and group_alive(pgid, None, live_groups()):
                os.killpg(pgid, signal.SIGKILL)
        remove_cgroups(self.state_dir)


def server_pids(rec: ServerRecord) -> set[int]:
    cgroup = rec.run_cgroup()
    return cgroup.members() if cgroup is not None else {rec.pgid} if rec.pgid else set()


def reserved_map(n: int) -> Mapping[tuple[str, str], int]:
    return {(NODE, "rtx4090"): n}
