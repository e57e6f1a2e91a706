"""Benchmark of POST /v1/jobs from 50 concurrent clients against the real service process.

For each backend (SQLite file, PostgreSQL schema) and each API worker count (`--workers`,
default 1 and 2) it builds a fresh database (3 tiers, 24 nodes x 8 GPUs, 10 labs, one user
and token per client) and starts the API as production runs it: `python -m jpushare.service
serve --no-dispatcher --workers N` on a free localhost port (uvicorn, no access log; the
dispatcher is left out so that only the API is measured). After `--warmup` uncounted
requests it runs two tests:

- closed loop (saturation): `--clients` clients, one keep-alive connection each, each
  sending its next request as soon as the previous answer arrives, `--requests` in all:
  the throughput the service sustains, and the latencies at that load.
- open loop (a fixed arrival rate): for each rate R in `--rates`, the same clients, whose
  requests arrive as independent Poisson processes totalling R req/s (`--arrivals even`:
  evenly spaced) for `--duration` seconds. Latency is measured from each request's
  *scheduled* send time, so a request that waits for its client's previous one (or that
  the server queues) counts its wait: no coordinated omission. A client sends one request
  at a time on its connection, as a client of this API does. Rates stop after the first
  one whose p99 exceeds 2 s (saturated; the higher ones would only be worse).

Both tests count only 201 answers (anything else aborts the run) and report p50/p95/p99/max
latency (client side, ms), the achieved rate, and the CPU time per request of the server
(all its processes, from /proc) and of the load generator. The load generator is a minimal
asyncio HTTP/1.1 client (not httpx: it costs about a tenth of the CPU per request), and it
runs on the same machine: it and the server share the CPUs, which `os.cpu_count()` reports
in the output. Nothing is asserted: the numbers go in the README. The last lines are a
markdown table and, per configuration, the highest tested rate whose p99 is under
`--target-ms` (50).

Run: `.venv/bin/python bench/bench_api.py [--backend sqlite|postgresql|both]
[--workers 1,2] [--requests 5000] [--clients 50] [--rates 25,50,100,150,200,300,400]
[--duration 15]`; PostgreSQL is `JPUSHARE_TEST_POSTGRES_URL` (default
postgresql+psycopg://postgres@127.0.0.1:5432/test), in a schema dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from jpushare import store
from jpushare.executors.base import GpuGroup, NodeState
from jpushare.policy import Tier

TIERS = (Tier("rtx3080ti", 34.1, 10), Tier("rtx4090", 82.6, 20), Tier("rtx5090", 104.8, 30))
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
T0 = datetime(2026, 1, 5, 9, 0, 0, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[1]
SIZES = (1, 1, 1, 1, 2, 4, 8)  # num_gpus of the submitted jobs, drawn uniformly
REQUEST_TIMEOUT_S = 60.0
SATURATED_P99_MS = 2000.0


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


@dataclass(frozen=True, slots=True)
class Server:
    base: str
    host: str
    port: int
    pid: int


@contextmanager
def server(url: str, workers: int, state_dir: Path) -> Iterator[Server]:
    """`jpushare serve --no-dispatcher --workers N` on `url`, on a free port."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JPUSHARE_")}
    env.update(
        JPUSHARE_DATABASE_URL=url,
        JPUSHARE_STATE_DIR=str(state_dir),
        PYTHONPATH=str(REPO / "src"),
    )
    log_path = state_dir / "serve.log"
    state_dir.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as out:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "jpushare.service", "serve", "--no-dispatcher"),
                *(("--workers", str(workers)) if workers != 1 else ()),
                *("--port", str(port), "--log-level", "WARNING"),
            ],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the API server did not start:\n{log_path.read_text()}")
            time.sleep(0.1)
        yield Server(base, "127.0.0.1", port, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def process_tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of `pid` and its live child processes (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
        if int(entry.name) == pid or int(fields[1]) == pid:
            total += int(fields[11]) + int(fields[12])
    return total / tick


def machine_busy_cpu_s() -> float:
    """CPU seconds the whole machine spent busy (all CPUs, every process: the server, the
    load generator, PostgreSQL and anything else running), from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


# --- a minimal HTTP/1.1 client -----------------------------------------------------------


class Connection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON to /v1/jobs with a bearer token.

    uvicorn closes a connection idle for 5 s (its keep-alive timeout), which a client at a
    low rate often is: like an HTTP client's pool, this one then opens a new connection
    (before sending, once idle for `IDLE_REOPEN_S`; or when the server closed it before
    answering anything). The reconnection counts in the request's latency.
    """

    IDLE_REOPEN_S = 4.0

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host = host
        self.port = port
        self.head = (
            f"POST /v1/jobs HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        ).encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.last_used = 0.0

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.last_used = time.monotonic()

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with suppress(OSError):
                await self.writer.wait_closed()
            self.writer = None

    async def post(self, body: bytes) -> tuple[int, bytes]:
        if self.writer is None or time.monotonic() - self.last_used > self.IDLE_REOPEN_S:
            await self.close()
            await self.open()
        try:
            return await self._post(body)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            if isinstance(exc, asyncio.IncompleteReadError) and exc.partial:
                raise
            # Closed by the server before it read the request: send it again.
            await self.close()
            await self.open()
            return await self._post(body)

    async def _post(self, body: bytes) -> tuple[int, bytes]:
        assert self.reader is not None and self.writer is not None
        self.writer.write(self.head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        payload = await self.reader.readexactly(length)
        self.last_used = time.monotonic()
        return status, payload


def job_body(i: int, rng: random.Random) -> bytes:
    return json.dumps(
        {"name": f"bench-{i}", "command": "true", "num_gpus": rng.choice(SIZES), "workdir": "/tmp"}
    ).encode()


async def _connections(srv: Server, tokens: list[str]) -> list[Connection]:
    conns = [Connection(srv.host, srv.port, t) for t in tokens]
    await asyncio.gather(*(c.open() for c in conns))
    return conns


def _check(status: int, payload: bytes, i: int) -> None:
    if status != 201:
        raise RuntimeError(f"request {i}: HTTP {status} {payload[:200]!r}")


async def closed_loop(
    srv: Server, tokens: list[str], total: int, seed: int
) -> tuple[list[float], float]:
    """`total` requests from len(tokens) clients with no think time: latencies (s), wall (s)."""
    rng = random.Random(seed)
    bodies = [job_body(i, rng) for i in range(total)]
    latencies: list[float] = []
    next_index = 0
    conns = await _connections(srv, tokens)

    async def client(conn: Connection) -> None:
        nonlocal next_index
        while next_index < total:
            i = next_index
            next_index += 1
            start = time.perf_counter()
            status, payload = await asyncio.wait_for(conn.post(bodies[i]), REQUEST_TIMEOUT_S)
            latencies.append(time.perf_counter() - start)
            _check(status, payload, i)

    start = time.perf_counter()
    try:
        await asyncio.gather(*(client(c) for c in conns))
    finally:
        await asyncio.gather(*(c.close() for c in conns))
    return latencies, time.perf_counter() - start


async def open_loop(
    srv: Server, tokens: list[str], rate: float, duration_s: float, poisson: bool, seed: int
) -> tuple[list[float], float]:
    """Arrivals at `rate` req/s in all for `duration_s`, spread over the clients; latency
    from each request's scheduled time (s); the wall time until the last answer (s)."""
    rng = random.Random(seed)
    n_clients = len(tokens)
    # Every client gets its own arrival times; together they make the total rate.
    schedules: list[list[float]] = []
    for c in range(n_clients):
        per_client = rate / n_clients
        times: list[float] = []
        t = rng.expovariate(per_client) if poisson else (c + rng.random()) / rate
        while t < duration_s:
            times.append(t)
            t += rng.expovariate(per_client) if poisson else n_clients / rate
        schedules.append(times)
    count = sum(len(s) for s in schedules)
    bodies = [job_body(i, rng) for i in range(count)]
    latencies: list[float] = []
    conns = await _connections(srv, tokens)
    loop = asyncio.get_running_loop()
    t0 = loop.time() + 0.2

    async def client(conn: Connection, times: list[float], first: int) -> None:
        for k, offset in enumerate(times):
            scheduled = t0 + offset
            delay = scheduled - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            status, payload = await asyncio.wait_for(
                conn.post(bodies[first + k]), REQUEST_TIMEOUT_S
            )
            latencies.append(loop.time() - scheduled)
            _check(status, payload, first + k)

    firsts = [sum(len(s) for s in schedules[:c]) for c in range(n_clients)]
    try:
        await asyncio.gather(
            *(client(conn, s, f) for conn, s, f in zip(conns, schedules, firsts, strict=True))
        )
    finally:
        await asyncio.gather(*(c.close() for c in conns))
    return latencies, loop.time() - t0


# --- reporting -----------------------------------------------------------------------------


def percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


@dataclass(frozen=True, slots=True)
class Row:
    backend: str
    workers: int
    test: str  # "closed" or "open"
    offered: float | None  # req/s (open loop)
    achieved: float
    count: int
    p50: float
    p95: float
    p99: float
    max: float
    server_cpu_ms: float
    client_cpu_ms: float
    machine_cpu_ms: float


def measure(
    backend: str,
    workers: int,
    test: str,
    offered: float | None,
    srv: Server,
    run: Coroutine[Any, Any, tuple[list[float], float]],
) -> Row:
    cpu0, mine0, all0 = process_tree_cpu_s(srv.pid), time.process_time(), machine_busy_cpu_s()
    latencies, wall = asyncio.run(run)
    cpu1, mine1, all1 = process_tree_cpu_s(srv.pid), time.process_time(), machine_busy_cpu_s()
    ms = sorted(v * 1000 for v in latencies)
    n = len(ms)
    row = Row(
        backend,
        workers,
        test,
        offered,
        n / wall,
        n,
        percentile(ms, 0.50),
        percentile(ms, 0.95),
        percentile(ms, 0.99),
        ms[-1],
        (cpu1 - cpu0) * 1000 / n,
        (mine1 - mine0) * 1000 / n,
        (all1 - all0) * 1000 / n,
    )
    what = "closed loop" if offered is None else f"open {offered:5.0f} req/s"
    print(
        f"{backend:<10} workers {workers}  {what:<16} {n:>6} req  {row.achieved:7.1f} req/s  "
        f"p50 {row.p50:7.1f}  p95 {row.p95:7.1f}  p99 {row.p99:7.1f}  max {row.max:7.1f} ms  "
        f"CPU/req: server {row.server_cpu_ms:4.2f}, load generator {row.client_cpu_ms:4.2f}, "
        f"machine {row.machine_cpu_ms:4.2f} ms",
        flush=True,
    )
    return row


def background_cpus(seconds: float = 2.0) -> float:
    """CPUs the machine keeps busy without this benchmark's load (other work on it)."""
    before = machine_busy_cpu_s()
    time.sleep(seconds)
    return (machine_busy_cpu_s() - before) / seconds


def run_config(backend: str, workers: int, args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    print(
        f"{backend}, {workers} API worker(s): before the run, other work keeps "
        f"{background_cpus():.2f} of {os.cpu_count()} CPUs busy",
        flush=True,
    )
    with database(backend, args.pg_url) as url, tempfile.TemporaryDirectory() as state:
        tokens = populate(url, args.clients)
        with server(url, workers, Path(state)) as srv:
            asyncio.run(closed_loop(srv, tokens, args.warmup, seed=0))
            rows.append(
                measure(
                    backend,
                    workers,
                    "closed",
                    None,
                    srv,
                    closed_loop(srv, tokens, args.requests, seed=1),
                )
            )
            for k, rate in enumerate(args.rates):
                run = open_loop(srv, tokens, rate, args.duration, args.arrivals == "poisson", 2 + k)
                row = measure(backend, workers, "open", rate, srv, run)
                rows.append(row)
                if row.p99 > SATURATED_P99_MS:
                    break
    return rows


def markdown(rows: list[Row], target_ms: float, arrivals: str) -> str:
    out = [
        "| backend | API workers | load | achieved req/s | p50 ms | p95 ms | p99 ms | max ms "
        "| CPU ms/req: server | load generator | whole machine |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        load = (
            "closed loop, 50 clients, no think time"
            if r.offered is None
            else f"open loop, {r.offered:g} req/s ({arrivals})"
        )
        out.append(
            f"| {r.backend} | {r.workers} | {load} | {r.achieved:.0f} | {r.p50:.1f} | "
            f"{r.p95:.1f} | {r.p99:.1f} | {r.max:.0f} | {r.server_cpu_ms:.2f} | "
            f"{r.client_cpu_ms:.2f} | {r.machine_cpu_ms:.2f} |"
        )
    out.append("")
    configs = sorted({(r.backend, r.workers) for r in rows})
    for backend, workers in configs:
        mine = [r for r in rows if (r.backend, r.workers) == (backend, workers)]
        closed = next(r for r in mine if r.offered is None)
        opened = sorted(
            ((r.offered, r.p99) for r in mine if r.offered is not None), key=lambda x: x[0]
        )
        held = 0.0  # the highest rate with p99 under target there and at every lower rate
        for offered, p99 in opened:
            if p99 >= target_ms:
                break
            held = offered
        above = [f"{o:g}" for o, p in opened if p < target_ms and o > held]
        below = (
            f"p99 < {target_ms:g} ms at every tested rate up to {held:g} req/s"
            if held
            else f"p99 < {target_ms:g} ms not even at the lowest tested rate"
        )
        if above:
            below += f" (and again at {', '.join(above)} req/s)"
        out.append(
            f"- {backend}, {workers} API worker(s): {below}; saturation throughput "
            f"{closed.achieved:.0f} req/s (closed loop, p99 {closed.p99:.0f} ms)."
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--workers", default="1,2", help="API worker counts, comma-separated")
    parser.add_argument("--requests", type=int, default=5000, help="closed-loop requests")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument(
        "--rates", default="25,50,100,150,200,300,400", help="open-loop req/s, comma-separated"
    )
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per rate")
    parser.add_argument("--arrivals", choices=["poisson", "even"], default="poisson")
    parser.add_argument("--target-ms", type=float, default=50.0)
    parser.add_argument(
        "--pg-url", default=os.environ.get("JPUSHARE_TEST_POSTGRES_URL") or DEFAULT_PG
    )
    args = parser.parse_args()
    args.rates = [float(r) for r in args.rates.split(",") if r.strip()]
    worker_counts = [int(w) for w in args.workers.split(",") if w.strip()]
    print(
        f"POST /v1/jobs, {args.clients} clients; server and load generator share "
        f"{os.cpu_count()} CPUs; open-loop arrivals: {args.arrivals}, {args.duration:g} s "
        "per rate",
        flush=True,
    )
    rows: list[Row] = []
    for backend in ("sqlite", "postgresql") if args.backend == "both" else (args.backend,):
        for workers in worker_counts:
            rows.extend(run_config(backend, workers, args))
    print()
    print(markdown(rows, args.target_ms, args.arrivals))


if __name__ == "__main__":
    main()
