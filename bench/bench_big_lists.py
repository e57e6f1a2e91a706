"""The memory a flood of big jobs costs the API: server RSS before and after parallel lists.

One user submits `--jobs` jobs, each with an environment of ~`--env-kb` KB and a command of
~`--command-kb` KB (what one request may carry); then `--clients` clients of another user
ask `GET /v1/jobs?limit=1000` at once, `--rounds` times. The server is the real API
(`create_app` under uvicorn, in its own process, on a SQLite file), and its resident
memory (VmRSS, /proc) is read before the flood, after it, and after the lists; VmHWM is its
peak. Per-user quotas are off (`JPUSHARE_MAX_JOB_BYTES_PER_USER=0`) so that the flood is
stored whole: the lists are what is measured. Nothing is asserted: the numbers go in the
README.

Run: `.venv/bin/python bench/bench_big_lists.py [--jobs 160] [--clients 6] [--rounds 3]`
(`--src DIR` runs the server on another checkout's sources, to compare).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from jpushare import store
from jpushare.executors.base import GpuGroup, NodeState
from jpushare.policy import Tier

REPO = Path(__file__).resolve().parents[1]
T0 = store.utc_now()

SERVER = """
import sys, uvicorn
from jpushare import store
from jpushare.api import create_app
sessions = store.make_sessionmaker(store.make_engine(sys.argv[1]))
app = create_app(sessions, munge=None)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", access_log=False)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of the process, MB."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in status)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def prepare(url: str) -> dict[str, str]:
    store.upgrade(url)
    engine = store.make_engine(url)
    tokens = {}
    with store.make_sessionmaker(engine).begin() as s:
        store.upsert_tiers(s, [Tier("rtx4090", 82.6, 20)])
        store.sync_inventory(s, [GpuGroup("node-a", "rtx4090", 8, 0, NodeState.UP)], T0)
        for lab in ("alpha", "beta"):
            store.create_lab(s, lab, T0)
        for name, lab in (("mallory", "alpha"), ("viewer", "beta")):
            user = store.create_user(s, name, lab, "student", T0, unix_user="nobody")
            tokens[name] = store.issue_token(s, user.id, T0).secret
    engine.dispose()
    return tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=160)
    parser.add_argument("--env-kb", type=int, default=500)
    parser.add_argument("--command-kb", type=int, default=99)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--src", type=Path, default=REPO / "src")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = store.sqlite_url(Path(tmp) / "big.sqlite")
        tokens = prepare(url)
        port = free_port()
        env = {
            **os.environ,
            "PYTHONPATH": str(args.src),
            "JPUSHARE_MAX_JOB_BYTES_PER_USER": "0",
            "JPUSHARE_MAX_ACTIVE_JOBS_PER_USER": "0",
        }
        server = subprocess.Popen([sys.executable, "-c", SERVER, url, str(port)], env=env)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    httpx.get(base + "/healthz", timeout=1)
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            idle = rss_mb(server.pid)
            body = {
                "command": "python train.py " + "c" * (args.command_kb * 1000),
                "num_gpus": 1,
                "workdir": "/tmp",
                "environment": {f"V{i}": "e" * 100_000 for i in range(max(1, args.env_kb // 100))},
            }
            mallory = httpx.Client(
                base_url=base, headers={"Authorization": f"Bearer {tokens['mallory']}"}
            )
            for _ in range(args.jobs):
                mallory.post("/v1/jobs", json=body, timeout=60).raise_for_status()
            flooded = rss_mb(server.pid)
            seconds: list[float] = []

            def lists() -> None:
                with httpx.Client(
                    base_url=base,
                    headers={"Authorization": f"Bearer {tokens['viewer']}"},
                    timeout=300,
                ) as c:
                    for _ in range(args.rounds):
                        t = time.perf_counter()
                        c.get("/v1/jobs", params={"limit": 1000}).raise_for_status()
                        seconds.append(time.perf_counter() - t)

            threads = [threading.Thread(target=lists) for _ in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            listed = rss_mb(server.pid)
        finally:
            server.terminate()
            server.wait(timeout=30)
    seconds.sort()
    print(f"sources: {args.src}")
    print(
        f"{args.jobs} jobs of ~{args.env_kb} KB environment + ~{args.command_kb} KB command; "
        f"{args.clients} clients x {args.rounds} GET /v1/jobs?limit=1000 of another user"
    )
    print(f"server RSS idle        {idle[0]:8.0f} MB")
    print(f"server RSS after flood {flooded[0]:8.0f} MB")
    print(f"server RSS after lists {listed[0]:8.0f} MB  (peak VmHWM {listed[1]:.0f} MB)")
    print(
        f"list latency p50 {seconds[len(seconds) // 2] * 1000:.0f} ms, "
        f"max {seconds[-1] * 1000:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
