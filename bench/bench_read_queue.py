"""Concurrent GET /v1/queue on SQLite: readers must not serialise on the write lock.

Builds a SQLite database as `bench_api` does (3 tiers, 24 nodes x 8 GPUs, 10 labs), queues
`--jobs` jobs (default 4,000), starts `jpushare serve --no-dispatcher` on a free localhost
port and has `--clients` threads (8) each send `--requests` (10) GET /v1/queue one after
another, while one more client sends POST /v1/jobs one after another until they are done.
Each GET loads the queue and decides over all of it, so with readers under `BEGIN
IMMEDIATE` (and one DB slot per process) the GETs ran one at a time and a POST waited
behind them; with read-only sessions they overlap and the POSTs go through. Prints the GET
and POST latencies (p50, max, ms) and the wall time; nothing is asserted.

Run: `.venv/bin/python bench/bench_read_queue.py [--jobs 4000] [--clients 8] [--requests 10]
[--workers 1] [--no-post]`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench_api import T0, populate, server
from jpushare import store


def queue_jobs(url: str, jobs: int, users: int) -> None:
    engine = store.make_engine(url)
    sessions = store.make_sessionmaker(engine)
    with sessions.begin() as s:
        ids = [store.get_user(s, f"user-{i}").id for i in range(users)]
        for j in range(jobs):
            store.submit(
                s,
                user_id=ids[j % users],
                name=f"job-{j}",
                command="true",
                num_gpus=1 + j % 4,
                now=T0,
            )
    engine.dispose()


def summary(label: str, ms: list[float]) -> str:
    if not ms:
        return f"{label}: none"
    return f"{label}: n={len(ms)} p50={statistics.median(ms):.0f} ms max={max(ms):.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--workers", type=int, default=1, help="API worker processes")
    parser.add_argument("--no-post", action="store_true", help="GETs only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = store.sqlite_url(Path(tmp) / "bench.sqlite")
        store.upgrade(url)
        tokens = populate(url, args.clients + 1)
        queue_jobs(url, args.jobs, args.clients + 1)
        with server(url, args.workers, Path(tmp) / "state") as srv:
            gets: list[float] = []
            posts: list[float] = []
            done = threading.Event()

            def reader(token: str) -> None:
                headers = {"Authorization": f"Bearer {token}"}
                with httpx.Client(base_url=srv.base, headers=headers, timeout=60) as c:
                    for _ in range(args.requests):
                        t = time.perf_counter()
                        c.get("/v1/queue").raise_for_status()
                        gets.append((time.perf_counter() - t) * 1000)

            def writer(token: str) -> None:
                headers = {"Authorization": f"Bearer {token}"}
                body = {"name": "w", "command": "true", "num_gpus": 1, "workdir": "/tmp"}
                with httpx.Client(base_url=srv.base, headers=headers, timeout=60) as c:
                    while not done.is_set():
                        t = time.perf_counter()
                        c.post("/v1/jobs", json=body).raise_for_status()
                        posts.append((time.perf_counter() - t) * 1000)
                        time.sleep(0.05)

            threads = [threading.Thread(target=reader, args=(t,)) for t in tokens[:-1]]
            post_thread = threading.Thread(target=writer, args=(tokens[-1],))
            start = time.perf_counter()
            if not args.no_post:
                post_thread.start()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            wall = time.perf_counter() - start
            done.set()
            if not args.no_post:
                post_thread.join()
    print(
        f"SQLite, {args.jobs} queued jobs, {args.workers} API worker(s), "
        f"{args.clients} clients x {args.requests} GETs"
    )
    print(summary("GET /v1/queue", gets))
    print(summary("POST /v1/jobs meanwhile", posts))
    print(f"wall {wall:.1f} s")


if __name__ == "__main__":
    main()
