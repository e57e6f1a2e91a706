"""Benchmark of POST /v1/jobs under load: 50 concurrent clients against a real uvicorn server.

For each backend (SQLite file, PostgreSQL schema) it builds a fresh database (3 tiers,
24 nodes x 8 GPUs, 10 labs, one user and token per client), starts the API in a separate
process (`create_app` served by uvicorn, one worker, no access log) on a free localhost
port, sends `--warmup` requests it does not count, then `--requests` submissions from
`--clients` concurrent clients (asyncio + httpx, one connection each) and stops. It prints
throughput and latency percentiles (milliseconds, client side); it asserts nothing except
that every request got its 201.

Run: `.venv/bin/python bench/bench_api.py [--backend sqlite|postgresql|both]
[--requests 5000] [--clients 50]`; PostgreSQL is `JPUSHARE_TEST_POSTGRES_URL` (default
postgresql+psycopg://postgres@127.0.0.1:5432/test), in a schema dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from jpushare import store
from jpushare.executors.base import GpuGroup, NodeState
from jpushare.policy import Tier

TIERS = (Tier("rtx3080ti", 34.1, 10), Tier("rtx4090", 82.6, 20), Tier("rtx5090", 104.8, 30))
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
T0 = datetime(2026, 1, 5, 9, 0, 0, tzinfo=UTC)


def _admin(url: str, sql: str) -> None:
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(sa.text(sql))
    engine.dispose()


@contextmanager
def database(backend: str, pg_url: str) -> Iterator[str]:
    """A fresh, migrated database URL, removed afterwards."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as d:
            url = store.sqlite_url(Path(d) / "bench.sqlite")
            store.upgrade(url)
            yield url
        return
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    _admin(pg_url, f'CREATE SCHEMA "{schema}"')
    pg = make_url(pg_url).update_query_dict({"options": f"-csearch_path={schema}"})
    rendered = pg.render_as_string(hide_password=False)
    try:
        store.upgrade(rendered)
        yield rendered
    finally:
        _admin(pg_url, f'DROP SCHEMA "{schema}" CASCADE')


def populate(url: str, clients: int) -> list[str]:
    """Tiers, nodes, labs and one user + token per client; the tokens."""
    engine = store.make_engine(url)
    sessions = store.make_sessionmaker(engine)
    groups = [GpuGroup(f"node-{i:02d}", TIERS[i % 3].name, 8, 0, NodeState.UP) for i in range(24)]
    tokens = []
    with sessions.begin() as s:
        store.upsert_tiers(s, TIERS)
        store.sync_inventory(s, groups, T0)
        for lab in range(10):
            store.create_lab(s, f"lab-{lab}", T0)
        for i in range(clients):
            user = store.create_user(s, f"user-{i}", f"lab-{i % 10}", "student", T0)
            tokens.append(store.issue_token(s, user.id, T0).secret)
    engine.dispose()
    return tokens


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def serve(url: str, port: int) -> None:
    """The server process: the API on `url`, as `jpushare serve` would run it."""
    import uvicorn

    from jpushare.api import create_app

    engine = store.make_engine(url)
    app = create_app(store.make_sessionmaker(engine))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


@contextmanager
def server(url: str) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", url, "--port", str(port)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the API server did not start")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


async def load(base: str, tokens: list[str], total: int, seed: int) -> tuple[list[float], float]:
    """`total` submissions from len(tokens) concurrent clients: latencies (s), wall (s)."""
    rng = random.Random(seed)
    sizes = [rng.choice([1, 1, 1, 1, 2, 4, 8]) for _ in range(total)]
    latencies: list[float] = []
    next_index = 0

    async def client(token: str) -> None:
        nonlocal next_index
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits) as http:
            while next_index < total:
                i = next_index
                next_index += 1
                body = {"name": f"bench-{i}", "command": "true", "num_gpus": sizes[i]}
                start = time.perf_counter()
                r = await http.post("/v1/jobs", json=body, timeout=60)
                latencies.append(time.perf_counter() - start)
                if r.status_code != 201:
                    raise RuntimeError(f"request {i}: HTTP {r.status_code} {r.text[:200]}")

    start = time.perf_counter()
    await asyncio.gather(*(client(t) for t in tokens))
    return latencies, time.perf_counter() - start


def percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def run(backend: str, args: argparse.Namespace) -> None:
    with database(backend, args.pg_url) as url:
        tokens = populate(url, args.clients)
        with server(url) as base:
            asyncio.run(load(base, tokens, args.warmup, seed=0))
            latencies, wall = asyncio.run(load(base, tokens, args.requests, seed=1))
    ms = sorted(v * 1000 for v in latencies)
    print(
        f"{backend:<10} {len(ms):>6} req  {args.clients} clients  {wall:6.2f} s  "
        f"{len(ms) / wall:7.1f} req/s  p50 {percentile(ms, 0.50):6.1f}  "
        f"p95 {percentile(ms, 0.95):6.1f}  p99 {percentile(ms, 0.99):6.1f}  "
        f"max {ms[-1]:6.1f} ms  mean {statistics.fmean(ms):6.1f} ms",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument(
        "--pg-url", default=os.environ.get("JPUSHARE_TEST_POSTGRES_URL") or DEFAULT_PG
    )
    parser.add_argument("--serve", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    print(f"POST /v1/jobs, {os.cpu_count()} CPUs, one uvicorn worker", flush=True)
    for backend in ("sqlite", "postgresql") if args.backend == "both" else (args.backend,):
        run(backend, args)


if __name__ == "__main__":
    main()
