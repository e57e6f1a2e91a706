"""Normal users' latency and the dispatcher's cycle while hostile clients hold connections.

Starts `python -m jpushare.service serve --demo` (SQLite, the local executor, the example
cluster) on a free loopback port with a fresh state folder, then runs three phases of
`--duration` seconds each:

- rest: no hostile client;
- slow: `--slow` (1,000) clients that send a POST's headers (a third POST /v1/jobs with a
  valid bearer token; a third POST /v1/jobs/1/cancel, a route that takes no body, with a
  garbage MUNGE credential, a third with none), declare a 1,000-byte body and send one
  byte of it a second; each reconnects a second after the
  service drops it;
- idle: `--idle` (20,000) connections that send half a request line and then one header
  line every 10 s (the descriptor-exhaustion attack); each reconnects a second after the
  service drops or refuses it.

The hostile clients run in `--sources` child processes (each its own descriptor limit),
each from its own loopback address 127.0.0.10, .11, … (one host each); the normal users
connect from 127.0.0.1. During each phase, `--users` normal users each loop over
GET /v1/queue and POST /v1/jobs (a token, `true` on one GPU), 0.1 s apart; a request that
fails or takes over 10 s counts as failed. Printed per phase: the normal users' p50/p99
(ms) per route and failures, the dispatcher's cycles done (and failed: from the database's
health counters) and its mean cycle time (`jpushare_dispatch_cycle_seconds` of /metrics),
the service's CPU (its process's CPU time over the phase's wall time: 100 % is one CPU), its
peak descriptors (about the connections it holds) and memory, and how many
408s and 503s the hostile clients got. Nothing is asserted.

Run: `.venv/bin/python bench/bench_hostile.py [--duration 20] [--slow 1000] [--idle 20000]`
(about 3 minutes). `PYTHONPATH=<another checkout>/src` measures that checkout's service.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from jpushare import store
from jpushare.store.health import load_health

REPO = Path(__file__).resolve().parents[1]
REQUEST_TIMEOUT_S = 10.0
JOB = {"name": "bench", "command": "true", "num_gpus": 1, "workdir": "/tmp"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def raise_own_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# --- The hostile clients (a child process: `--child slow|idle`) ---


@dataclass
class HostileCounts:
    opened: int = 0
    held: int = 0
    got_408: int = 0
    got_503: int = 0
    dropped: int = 0  # closed with no answer, or refused at connect
    extra: dict[str, int] = field(default_factory=dict)


async def hostile(kind: str, host: str, port: int, source: str, token: str, stop: float) -> Any:
    counts = HostileCounts()

    async def one(i: int) -> None:
        while time.monotonic() < stop:
            try:
                reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
            except OSError:
                counts.dropped += 1
                await asyncio.sleep(1)
                continue
            counts.opened += 1
            counts.held += 1
            try:
                if kind == "slow":
                    auth = (
                        f"Authorization: Bearer {token}\r\n",
                        "Authorization: MUNGE MUNGE:garbage:\r\n",
                        "",
                    )[i % 3]
                    path = "/v1/jobs" if i % 3 == 0 else "/v1/jobs/1/cancel"
                    writer.write(
                        f"POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: "
                        "application/json\r\nContent-Length: 1000\r\n\r\n".encode()
                    )
                    step, piece = 1.0, b" "
                else:
                    writer.write(b"GET /v1/queue HTTP/1.1\r\nHost: x\r\n")
                    step, piece = 10.0, b"X-Idle: 1\r\n"
                while time.monotonic() < stop:
                    try:
                        answer = await asyncio.wait_for(reader.read(65536), step)
                    except TimeoutError:
                        writer.write(piece)
                        continue
                    status = answer[9:12]
                    if status == b"408":
                        counts.got_408 += 1
                    elif status == b"503":
                        counts.got_503 += 1
                    else:
                        counts.dropped += 1
                        if answer:
                            key = status.decode("latin-1")
                            counts.extra[key] = counts.extra.get(key, 0) + 1
                    break
            except OSError:
                counts.dropped += 1
            finally:
                counts.held -= 1
                writer.close()
            await asyncio.sleep(1)

    count = int(os.environ["BENCH_COUNT"])
    tasks = []
    for i in range(count):
        tasks.append(asyncio.create_task(one(i)))
        if i % 200 == 199:
            await asyncio.sleep(0.05)  # a connect storm, not a SYN flood
    held_at_end = 0
    while time.monotonic() < stop - 0.5:
        await asyncio.sleep(0.25)
        held_at_end = counts.held
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    counts.held = held_at_end
    return counts.__dict__


def child_main(args: argparse.Namespace) -> None:
    raise_own_fd_limit()
    stop = time.monotonic() + args.duration
    out = asyncio.run(hostile(args.child, "127.0.0.1", args.port, args.source, args.token, stop))
    print(json.dumps(out), flush=True)


@contextmanager
def hostile_clients(
    kind: str, total: int, sources: int, port: int, token: str, duration: float
) -> Iterator[list[subprocess.Popen[str]]]:
    procs = []
    for k in range(sources):
        env = dict(os.environ, BENCH_COUNT=str(total // sources))
        procs.append(
            subprocess.Popen(
                [
                    *(sys.executable, __file__, "--child", kind, "--port", str(port)),
                    *("--source", f"127.0.0.{10 + k}", "--token", token),
                    *("--duration", str(duration)),
                ],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None and proc.returncode is None:
                with_timeout(proc)


def with_timeout(proc: subprocess.Popen[str]) -> None:
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def collect(procs: list[subprocess.Popen[str]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        for key, value in json.loads(out.strip().splitlines()[-1]).items():
            if isinstance(value, int):
                total[key] = total.get(key, 0) + value
    return total


# --- The normal users ---


async def normal_users(url: str, token: str, users: int, duration: float) -> dict[str, Any]:
    latencies: dict[str, list[float]] = {"GET /v1/queue": [], "POST /v1/jobs": []}
    failed: dict[str, int] = dict.fromkeys(latencies, 0)
    reasons: dict[str, int] = {}  # of the failures: a status or an exception
    stop = time.monotonic() + duration
    transport = httpx.AsyncHTTPTransport(local_address="127.0.0.1")
    async with httpx.AsyncClient(
        base_url=url,
        headers={"Authorization": f"Bearer {token}"},
        timeout=REQUEST_TIMEOUT_S,
        transport=transport,
        limits=httpx.Limits(max_connections=users),
    ) as client:

        async def user() -> None:
            while time.monotonic() < stop:
                for route in latencies:
                    method, path = route.split()
                    started = time.perf_counter()
                    try:
                        r = await client.request(
                            method, path, json=JOB if method == "POST" else None
                        )
                        ok = r.status_code in (200, 201)
                        why = str(r.status_code)
                    except httpx.HTTPError as exc:
                        ok, why = False, type(exc).__name__
                    if not ok:
                        reasons[why] = reasons.get(why, 0) + 1
                    took = time.perf_counter() - started
                    latencies[route].append(took if ok else REQUEST_TIMEOUT_S)
                    failed[route] += not ok
                    await asyncio.sleep(0.1)

        await asyncio.gather(*(user() for _ in range(users)))
    return {"latencies": latencies, "failed": failed, "reasons": reasons}


# --- The service ---


@dataclass
class Service:
    proc: subprocess.Popen[bytes]
    url: str
    state: Path
    token: str

    def fds(self) -> int:
        try:
            return len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        except OSError:
            return -1

    def cpu_s(self) -> float:
        """CPU seconds the service's process has used (all its threads)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self) -> float:
        try:
            text = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return -1.0
        match = re.search(r"VmRSS:\s+(\d+) kB", text)
        return int(match.group(1)) / 1024 if match else -1.0

    def cycles(self) -> tuple[int, int]:
        """(cycles done, cycles failed) from the database's health counters."""
        engine = store.make_engine(f"sqlite:///{self.state / 'jpushare.sqlite'}")
        try:
            with store.make_sessionmaker(engine)() as session:
                health = load_health(session)
        finally:
            engine.dispose()
        return health.cycles_ok, sum(health.cycles_failed.values())

    def cycle_seconds(self) -> tuple[float, float]:
        """(sum, count) of jpushare_dispatch_cycle_seconds, from /metrics."""
        try:
            text = httpx.get(f"{self.url}/metrics", timeout=30).text
        except httpx.HTTPError:
            return float("nan"), float("nan")
        total = count = 0.0
        for line in text.splitlines():
            if line.startswith("jpushare_dispatch_cycle_seconds_sum"):
                total = float(line.split()[-1])
            elif line.startswith("jpushare_dispatch_cycle_seconds_count"):
                count = float(line.split()[-1])
        return total, count


@contextmanager
def service(tmp: Path, cycle_s: float) -> Iterator[Service]:
    port = free_port()
    state = tmp / "var"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JPUSHARE_")}
    env.update(JPUSHARE_STATE_DIR=str(state), JPUSHARE_PORT=str(port))
    env.update(JPUSHARE_CYCLE_S=str(cycle_s))
    env.setdefault("PYTHONPATH", str(REPO / "src"))
    log = (tmp / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jpushare.service", "serve", "--demo"],
        env=env,
        cwd=REPO,  # the demo reads examples/cluster.yaml
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    tokens = state / "demo-tokens.env"
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the service did not start: {(tmp / 'serve.log').read_text()}")
        try:
            if tokens.exists() and httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    token = ""
    for line in tokens.read_text().splitlines():
        if line.startswith("export JPUSHARE_TOKEN="):
            token = line.split("=", 1)[1].split()[0]
    try:
        yield Service(proc, url, state, token)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def run_phase(
    svc: Service, name: str, kind: str | None, count: int, args: argparse.Namespace
) -> dict[str, Any]:
    before_sum, before_count = svc.cycle_seconds()
    _, failed0 = svc.cycles()
    settle = 5.0 if kind else 0.0
    hold_s = args.duration + settle + 2
    peak_fds, peak_rss = svc.fds(), svc.rss_mb()
    with hostile_clients(
        kind or "idle", count if kind else 0, args.sources if kind else 0, port_of(svc), svc.token,
        hold_s,
    ) as procs:  # fmt: skip
        time.sleep(settle)  # let them connect

        async def measure() -> dict[str, Any]:
            async def sample() -> None:
                nonlocal peak_fds, peak_rss
                while True:
                    peak_fds = max(peak_fds, svc.fds())
                    peak_rss = max(peak_rss, svc.rss_mb())
                    await asyncio.sleep(0.5)

            sampler = asyncio.create_task(sample())
            try:
                return await normal_users(svc.url, svc.token, args.users, args.duration)
            finally:
                sampler.cancel()

        cpu0, wall0 = svc.cpu_s(), time.monotonic()
        users = asyncio.run(measure())
        cpu_share = (svc.cpu_s() - cpu0) / (time.monotonic() - wall0)
        _, failed1 = svc.cycles()
        hostile_counts = collect(procs) if procs else {}
    after_sum, after_count = svc.cycle_seconds()
    cycles = after_count - before_count  # NaN if /metrics did not answer
    return {
        "phase": name,
        "users": users,
        "cycles_ok": cycles,
        "cycles_failed": failed1 - failed0,
        "cycle_ms": (after_sum - before_sum) / cycles * 1000 if cycles > 0 else float("nan"),
        "service_cpu": cpu_share,
        "peak_fds": peak_fds,
        "peak_rss_mb": peak_rss,
        "hostile": hostile_counts,
    }


def port_of(svc: Service) -> int:
    return int(svc.url.rsplit(":", 1)[1])


def print_table(rows: list[dict[str, Any]], elapsed: float) -> None:
    print()
    print(
        "| phase | GET /v1/queue p50 / p99 ms | POST /v1/jobs p50 / p99 ms | failed | "
        "cycles ok / failed | cycle ms | service CPU | peak fds | peak RSS MB | "
        "hostile answered 408 / 503 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        lat, failed = row["users"]["latencies"], row["users"]["failed"]
        q, p = lat["GET /v1/queue"], lat["POST /v1/jobs"]
        h = row["hostile"]
        hostile_text = f"{h['got_408']} / {h['got_503']}" if h else "-"
        print(
            f"| {row['phase']} | {pct(q, 0.5):.0f} / {pct(q, 0.99):.0f} | "
            f"{pct(p, 0.5):.0f} / {pct(p, 0.99):.0f} | {sum(failed.values())} of "
            f"{len(q) + len(p)} | {row['cycles_ok']} / {row['cycles_failed']} | "
            f"{row['cycle_ms']:.0f} | {row['service_cpu']:.0%} | {row['peak_fds']} | "
            f"{row['peak_rss_mb']:.0f} | "
            f"{hostile_text} |"
        )
    print(f"\n{os.cpu_count()} CPUs shared by the service, the users and the hostile clients; "
          f"{elapsed:.0f} s in all")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per phase")
    parser.add_argument("--slow", type=int, default=1000)
    parser.add_argument("--idle", type=int, default=20000)
    parser.add_argument("--sources", type=int, default=4, help="hostile processes/addresses")
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--cycle-s", type=float, default=1.0)
    parser.add_argument("--child", choices=["slow", "idle"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--source", help=argparse.SUPPRESS)
    parser.add_argument("--token", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args)
        return
    raise_own_fd_limit()
    started = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as tmp, service(
        Path(tmp), args.cycle_s
    ) as svc:  # fmt: skip
        for name, kind, count in (
            ("rest", None, 0),
            (f"{args.slow} slow clients", "slow", args.slow),
            (f"{args.idle} idle connections", "idle", args.idle),
        ):
            row = run_phase(svc, name, kind, count, args)
            rows.append(row)
            summary = {k: v for k, v in row.items() if k != "users"}
            print(json.dumps(summary | {"failures": row["users"]["reasons"]}), flush=True)
            time.sleep(2)  # the service forgets the phase's connections
    print_table(rows, time.monotonic() - started)


if __name__ == "__main__":
    main()
