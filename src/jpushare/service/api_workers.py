"""`jpushare serve --workers N`: the API in N uvicorn worker processes.

The dispatcher stays in the main process (`serve.run_service` starts it as before, on a
thread); only the API is multiplied. The main process runs migrations and demo setup,
binds the listening socket, then uvicorn's supervisor starts N worker processes (spawned,
not forked) that share the socket, restarts a worker that dies, and stops them all on
SIGINT / SIGTERM. Every worker serves through the same guarded protocol as one process
(`service.http_server`: header and body deadlines, connection caps), each counting its own
connections. Each worker builds its own app with `create_worker_app`, an import-string
factory that reads the settings from the environment it inherits (`load_settings()`: the
same `JPUSHARE_*` variables the main process read) and builds its own engine and executor
(for cancel and the log endpoint; the local executor keeps its state in files under a
lock, so several processes may share it). Workers never run a dispatcher; in any case the
dispatcher lock lets only one process act.

On SQLite, prefer one worker: a process's requests take turns at the one write lock in
order (one database slot per process, see `jpushare.api.deps`), but processes wait for it in
SQLite's busy handler, which sleeps; near saturation that costs p99 (`bench/bench_api.py`).

What differs from one process: each worker has its own `ServiceMetrics`, so `/metrics` of a
worker exports the figures read from the database but not the main process's
`jpushare_dispatch_cycle_seconds`. The dispatcher's health (cycles done and failed, failed
executor calls, the last success, the lease holder) is among the database's figures
(`store.health`), so every worker's `/metrics` and `/healthz` report it.
"""

from __future__ import annotations

import logging
import socket

from fastapi import FastAPI

from jpushare.config import Settings
from jpushare.service.http_server import ConnectionLimits, GuardedConfig
from jpushare.store.engine import is_sqlite

APP_FACTORY = "jpushare.service.api_workers:create_worker_app"

log = logging.getLogger(__name__)


def create_worker_app() -> FastAPI:
    """The app of one worker process, from the environment's settings."""
    from jpushare import store
    from jpushare.api.app import create_app
    from jpushare.config import load_settings
    from jpushare.formats.cluster_file import load_cluster
    from jpushare.policy.peers import named_policy
    from jpushare.service.account_rule import served_account
    from jpushare.service.serve import build_executor
    from jpushare.store.observations import load_observed_busy

    settings = load_settings()
    sessions = store.make_sessionmaker(store.make_engine(settings.database_url))
    # Without JPUSHARE_CLUSTER (e.g. --demo) the local executor reads the declared GPUs from
    # the inventory, which the main process has loaded before starting the workers.
    cluster = load_cluster(settings.cluster_file) if settings.cluster_file is not None else None
    executor = build_executor(settings, sessions, cluster)
    return create_app(
        sessions,
        executor=executor,
        observed_busy=load_observed_busy,
        max_body_bytes=settings.max_body_bytes,
        body_timeout_s=settings.connections.body_timeout_s,
        user_quotas=settings.user_quotas,
        only_unix_user=served_account(settings.executor),
        placement_order=settings.placement_order,
        policy=named_policy(settings.policy, settings.top_job, settings.reserved_gpus),
    )


def keep_nodelay(sock: socket.socket) -> None:
    """Turn Nagle's algorithm off on a listening TCP socket's connections.

    uvicorn's `Config.bind_socket` leaves the socket's `proto` at 0, and asyncio sets
    TCP_NODELAY on an accepted connection only when `proto` is IPPROTO_TCP; so with
    `--workers N` every response (headers and body are two writes) could wait ~40 ms for the
    client's delayed ACK (uvicorn issue #3149). Linux copies TCP_NODELAY from the listening
    socket to the sockets it accepts.
    """
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def run_api_workers(settings: Settings, workers: int, limits: ConnectionLimits) -> bool:
    """Serve the API from `workers` processes until SIGINT / SIGTERM (uvicorn's supervisor
    handles both while it runs). False if it could not start (port taken, app failing).
    Each worker serves through `service.http_server` with `limits`, counted per worker."""
    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors import Multiprocess

    if is_sqlite(settings.database_url):
        log.warning(
            "--workers %d on SQLite: the workers take turns at the database's one write lock "
            "across processes, waiting in SQLite's busy handler (sleeps of up to 100 ms); "
            "near saturation expect a worse p99 than with one worker. PostgreSQL suits "
            "several workers better.",
            workers,
        )
    log.info("API connections, in each of %d workers: %s", workers, limits.describe())
    config = GuardedConfig(
        APP_FACTORY,
        limits=limits,
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=workers,
        log_level="info",
        access_log=False,
    )
    try:
        sock = config.bind_socket()
    except SystemExit:  # uvicorn logged why
        return False
    keep_nodelay(sock)
    supervisor = Multiprocess(config, sockets=[sock])
    try:
        supervisor.run()
    finally:
        sock.close()
    return not any(p.exitcode == STARTUP_FAILURE for p in supervisor.processes)
