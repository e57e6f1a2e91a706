"""`jpushare serve`: the service in one process — migrations, executor, dispatcher, API.

Order of start: settings → migrations (`store.migrate.upgrade`) → sessions → (demo data)
→ the single-account rule (`account_rule`: a service that is not root serves one Unix
account only) → executor → LLM router client → the dispatcher loop on a thread (it acts
only while it holds the dispatcher lease, see `dispatcher.lock`) → the notifier's threads
(mail and webhook, `jpushare.notify`, where `JPUSHARE_SMTP_HOST` or `JPUSHARE_NOTIFY_URL`
is set; with the dispatcher, sending while it leads) → the API under uvicorn on the main
thread. SIGINT / SIGTERM stop uvicorn (which finishes its requests), then the dispatcher
(which finishes its cycle and releases its lease); jobs keep running, and the next
service start finds them again (the executor keeps their state outside the process).

No client can take what the dispatcher needs: on a database server it has an engine (a
connection pool) of its own, not the API's (on SQLite it shares the API's pool, which the
API's slots never fill); the process's soft descriptor limit is raised to the hard one at
start and `JPUSHARE_RESERVED_FDS` of it are never given to connections; and uvicorn
serves through `service.http_server`, whose deadlines and per-process and per-address
connection caps drop slow and surplus clients before they reach the app.

The executor (`JPUSHARE_EXECUTOR`):
- `local`: GPUs from NVML / nvidia-smi, else declared by the cluster file
  (`JPUSHARE_CLUSTER`, or the demo's), else by the inventory already in the database;
- `slurm`: `SlurmExecutor` with the `JPUSHARE_SLURM_*` settings (`jpushare.config`): job
  output in `JPUSHARE_SLURM_LOG_DIR` (default `<state dir>/slurm-logs`; it must be on a
  file system the compute nodes share), GRES type -> tier names, extra sbatch options, the
  job name prefix. The executor alone maps GRES types to tiers: the dispatcher sees only
  tier names, so the inventory, the busy GPUs and every sbatch speak of the same tiers.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.config import DEFAULT_POLICY, ConfigError, Settings
from jpushare.dispatcher.cycle import CycleDeps, CycleReport
from jpushare.dispatcher.lock import lock_for
from jpushare.dispatcher.loop import Dispatcher
from jpushare.executors.base import Executor
from jpushare.executors.slurm import SlurmExecutor
from jpushare.formats.cluster_file import ClusterSpec, load_cluster
from jpushare.llm_router import router_for
from jpushare.policy.peers import named_policy
from jpushare.service.account_rule import check_service_account
from jpushare.service.dispatch_health import HealthRecorder, counting
from jpushare.store.cluster_setup import declared_inventory, inventory_is_empty, load_cluster_spec
from jpushare.store.engine import is_sqlite
from jpushare.store.observations import load_observed_busy
from jpushare.vocabulary import store_job_id

if TYPE_CHECKING:
    from jpushare.dispatcher.lock import Fence
    from jpushare.metrics import ServiceMetrics
    from jpushare.notify import NotifySettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServeOptions:
    api: bool = True
    dispatcher: bool = True
    demo: bool = False
    workers: int = 1  # API worker processes (the dispatcher stays in this one)


def build_executor(
    settings: Settings, sessions: sessionmaker[Session], cluster: ClusterSpec | None
) -> Executor:
    """The executor the settings name (see the module docstring)."""
    if settings.executor == "slurm":
        slurm = SlurmExecutor(
            settings.slurm_logs,
            gpu_type_to_tier=settings.slurm_gpu_types,
            name_prefix=settings.slurm_prefix,
            sbatch_args=settings.slurm_sbatch_args,
            submit_as_user=settings.slurm_submit_as_user,
            backfill_partition=settings.slurm_backfill_partition,
        )
        check_foreign_runs(slurm, sessions)
        return slurm
    from jpushare.executors.local import LocalExecutor

    declared: list[tuple[str, str, int]]
    if cluster is not None:
        declared = [(p.node, p.tier, p.capacity) for p in cluster.placements]
    else:
        with sessions() as session:
            declared = declared_inventory(session)
    executor = LocalExecutor(
        settings.state_dir / "executor",
        declared=declared,
        pids_max=settings.local_pids_max,
        output_max_bytes=settings.local_output_max_bytes,
    )
    check_foreign_runs(executor, sessions)
    if not executor.gpus:
        log.warning(
            "the local executor has no GPUs: no NVML / nvidia-smi GPU, no JPUSHARE_CLUSTER and "
            "no inventory in the database (run `jpushare init --cluster FILE`)"
        )
    return executor


def check_foreign_runs(executor: Executor, sessions: sessionmaker[Session]) -> None:
    """ConfigError if the executor holds runs that another database started.

    Runs are named by (job id, attempt) — Slurm's `<prefix>-<job id>-<attempt>`, the local
    executor's `<job id>.<attempt>` under `<state dir>/executor/runs` — and job ids restart
    at 1 in a new database: after a database is wiped and created again, the executor still
    holds the old one's runs (Slurm for `MinJobAge`, the local executor for ever), and the
    new job 1 would adopt the old run of job 1 (marked ended without ever running, charged
    the old run, showing its log). Jobs are never deleted and a run's attempt is counted
    before it is submitted, so a run whose job id this database does not have, or whose
    attempt is above that job's attempts, was started by another database. If the executor
    cannot be asked now, the dispatcher reports that each cycle; this check is skipped.
    """
    try:
        runs = executor.runs()
    except Exception as exc:  # e.g. SlurmError: Slurm does not answer now
        log.warning("could not list the executor's runs at start (%s): check skipped", exc)
        return
    # Only numeric ids can collide with this database's jobs (`jps-cap-1` cannot).
    names = {(run.job_id, run.attempt) for run in runs if run.job_id.isdigit()}
    if not names:
        return
    with sessions() as session:
        jobs = store.get_jobs(session, [store_job_id(name) for name, _ in names])
    attempts = {job.policy_id: job.attempts for job in jobs.values()}
    foreign = sorted(
        (store_job_id(job_id), attempt)
        for job_id, attempt in names
        if job_id not in attempts or attempt > attempts[job_id]
    )
    if not foreign:
        return
    job_id, attempt = foreign[0]
    if isinstance(executor, SlurmExecutor):
        raise ConfigError(
            f"Slurm still holds {len(foreign)} job(s) named {executor.name_prefix}-* whose "
            f"JPU-Share job is not in this database (e.g. {executor.name_prefix}-{job_id}-"
            f"{attempt}): another database used the prefix {executor.name_prefix!r} (one "
            "wiped and created again?), and its runs would be taken for this one's. Set "
            "JPUSHARE_SLURM_PREFIX to a prefix of this database's own, or wait until Slurm "
            "forgets them (MinJobAge)."
        )
    state_dir = getattr(executor, "state_dir", None)
    where = f"the executor's state directory {state_dir}" if state_dir else "the executor"
    raise ConfigError(
        f"{where} holds {len(foreign)} run(s) that this database did not start (e.g. job "
        f"{job_id} attempt {attempt}): they belong to another database (one wiped and "
        "created again?), and this database's jobs would adopt them. Move "
        f"{state_dir if state_dir else 'its state'} away (or point JPUSHARE_STATE_DIR "
        "elsewhere), or use the database it belongs to."
    )


def _cluster_spec(settings: Settings, demo: bool) -> ClusterSpec | None:
    if settings.cluster_file is not None:
        return load_cluster(settings.cluster_file)
    if demo:
        from jpushare.service.demo import DEMO_CLUSTER

        return load_cluster(DEMO_CLUSTER)
    return None


def check_state_is_ours(settings: Settings) -> None:
    """ConfigError (one line) when the state directory, or the SQLite database file or its
    directory, belongs to another account: whoever made it (a user, in a place they can
    write, before the service first started) could edit the database (make themselves an
    admin) and the run records."""
    me = os.geteuid()
    paths = [("state directory", settings.state_dir)]
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        db = Path(url.database)
        paths += [("database's directory", db.parent), ("database", db)]
    for what, path in paths:
        try:
            owner = path.lstat().st_uid
            if owner == me:  # a symlink of ours: what it points to counts
                owner = path.stat().st_uid
        except FileNotFoundError:
            continue
        if owner != me:
            raise ConfigError(
                f"the {what} {path} belongs to uid {owner}, not to this service (uid {me}): "
                "that account could change the scheduler's data; remove it or give it to "
                "the service's account"
            )


def public_url(settings: Settings) -> str:
    host = settings.host if settings.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    return f"http://{host}:{settings.port}"


# How long the main thread sleeps at a time without the API: the longest a stop signal
# that another thread received waits for its handler (see `run_service`).
SIGNAL_POLL_S = 0.5


def run_service(settings: Settings, options: ServeOptions) -> int:
    """Run until SIGINT / SIGTERM; the exit code."""
    # Everything the service writes is its own: jobs must not read the state directory, the
    # database or the run records (the jobs' own output files are made by the jobs).
    os.umask(0o077)
    from jpushare.service.http_server import GuardedConfig, limits_for, raise_fd_limit

    fd_limit = raise_fd_limit()
    limits = limits_for(settings.connections, fd_limit) if options.api else None
    settings.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_state_is_ours(settings)
    settings.state_dir.chmod(0o700)
    log.info("database: %s", _safe_url(settings.database_url))
    store.upgrade(settings.database_url)
    engine = store.make_engine(settings.database_url)
    sessions = store.make_sessionmaker(engine)
    cluster = _cluster_spec(settings, options.demo)
    banner = ""
    if options.demo:
        from jpushare.service.demo import instructions, prepare_demo

        assert cluster is not None
        demo = prepare_demo(sessions, cluster, settings.state_dir, public_url(settings))
        database = _safe_url(settings.database_url)
        banner = instructions(demo, public_url(settings), database, settings.state_dir)
    elif cluster is not None:
        with sessions.begin() as session:
            if inventory_is_empty(session):
                loaded = load_cluster_spec(session, cluster, store.utc_now())
                log.info("empty inventory: loaded %s (%s)", cluster.source, loaded)

    notify_settings = _notify_settings(options)  # before anything starts: a bad one stops it
    only_account = check_service_account(sessions, settings.executor)
    executor = build_executor(settings, sessions, cluster)
    router = router_for(settings.router_url)
    stop = threading.Event()
    server: Any = None

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %s: stopping", signal.Signals(signum).name)
        stop.set()
        if server is not None:
            server.should_exit = True

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

    from jpushare.metrics import ServiceMetrics

    metrics = ServiceMetrics()

    def on_cycle(report: CycleReport) -> None:
        metrics.observe_dispatch_cycle(report.duration_s)

    thread: threading.Thread | None = None
    # A database server: the dispatcher's own pool, which requests, however many and slow,
    # cannot hold. SQLite: the API's engine, whose pool the API's slots never fill
    # (`api.deps.db_slots_for` leaves connections spare) and whose one write lock is the
    # file's anyway; a second engine on the file in this process, with another process
    # reading it, was seen to end in "database disk image is malformed".
    dispatcher_engine = engine if is_sqlite(settings.database_url) else None
    if dispatcher_engine is None:
        dispatcher_engine = store.make_engine(settings.database_url)
    dispatcher_sessions = (
        sessions if dispatcher_engine is engine else store.make_sessionmaker(dispatcher_engine)
    )
    lock = lock_for(
        settings.database_url, sessions=dispatcher_sessions, lease_s=settings.dispatcher_lease_s
    )
    if options.dispatcher:
        # The dispatcher's health goes to the database, for every API process.
        health = HealthRecorder(
            dispatcher_sessions,
            holder=str(getattr(lock, "holder", None) or f"{socket.gethostname()}:{os.getpid()}"),
            cycle_s=settings.cycle_s,
        )

        def on_cycle_done(report: CycleReport) -> None:
            on_cycle(report)
            health.cycle_done(report)

        deps = CycleDeps(
            dispatcher_sessions,
            counting(executor, health.executor_failed),
            router,
            placement_order=settings.placement_order,
            policy=named_policy(settings.policy, settings.top_job, settings.reserved_gpus),
        )
        if settings.policy != DEFAULT_POLICY:
            log.warning(
                "JPUSHARE_POLICY=%s: dispatching by a peer policy for comparison, "
                "not by SPEC §3's reservations",
                settings.policy,
            )
        dispatcher = Dispatcher(
            deps,
            lock,
            cycle_s=settings.cycle_s,
            on_cycle=on_cycle_done,
            on_failure=health.cycle_failed,
        )
        thread = threading.Thread(
            target=dispatcher.run_forever, args=(stop,), name="dispatcher", daemon=True
        )
        thread.start()
    keeper_thread = _maybe_keeper(settings, executor, sessions, stop, options)
    notify_threads = _start_notifier(notify_settings, dispatcher_sessions, stop, lock, metrics)
    try:
        if options.api and options.workers > 1:
            from jpushare.service.api_workers import run_api_workers

            if banner:
                print(banner, flush=True)
            assert limits is not None
            if not run_api_workers(settings, options.workers, limits):
                log.error("the API could not start on %s:%d", settings.host, settings.port)
                return 1
        elif options.api:
            import uvicorn

            from jpushare.api.app import create_app

            app = create_app(
                sessions,
                executor=executor,
                observed_busy=load_observed_busy,
                metrics=metrics,
                max_body_bytes=settings.max_body_bytes,
                body_timeout_s=settings.connections.body_timeout_s,
                user_quotas=settings.user_quotas,
                only_unix_user=only_account,
                placement_order=settings.placement_order,
                policy=named_policy(settings.policy, settings.top_job, settings.reserved_gpus),
                cycle_s=settings.cycle_s,
            )
            assert limits is not None
            log.info("API connections: %s", limits.describe())
            config = GuardedConfig(
                app,
                limits=limits,
                host=settings.host,
                port=settings.port,
                log_level="info",
                access_log=False,
            )
            server = uvicorn.Server(config)
            if banner:
                print(banner, flush=True)
            server.run()  # returns on SIGINT / SIGTERM (our handler runs after it)
            if not server.started:
                log.error("the API could not start on %s:%d", settings.host, settings.port)
                return 1
        else:
            if banner:
                print(banner, flush=True)
            # Short waits, not one long one: the kernel may hand SIGTERM / SIGINT to the
            # dispatcher thread, and Python runs the handler only once this (main) thread
            # wakes up; a wait of an hour ignored `systemctl stop` for an hour.
            while not stop.wait(SIGNAL_POLL_S):
                pass
    finally:
        stop.set()
        if thread is not None:
            thread.join(timeout=settings.cycle_s + 60)
        if keeper_thread is not None:  # it stops its servers: at most their grace
            keeper_thread.join(timeout=120)
        for notify_thread in notify_threads:  # a send in flight: its timeout (daemon threads)
            notify_thread.join(timeout=5)
        router.close()
        close = getattr(lock, "close", None)
        if close is not None:
            close()
        engine.dispose()
        if dispatcher_engine is not engine:
            dispatcher_engine.dispose()
        for s, handler in previous.items():
            signal.signal(s, handler)
        log.info("service stopped")
    return 0


def _maybe_keeper(
    settings: Settings,
    executor: Executor,
    sessions: sessionmaker[Session],
    stop: threading.Event,
    options: ServeOptions,
) -> threading.Thread | None:
    """The backfill keeper on a thread, when JPUSHARE_BACKFILL_COMMAND is set (local
    executor, with the dispatcher): `make run` then keeps every free GPU serving."""
    if not os.environ.get("JPUSHARE_BACKFILL_COMMAND", "").strip() or not options.dispatcher:
        return None
    from jpushare.config import load_backfill_settings
    from jpushare.service.backfill import keeper_for, start_keeper_thread

    backfill = load_backfill_settings()
    keeper = keeper_for(settings, backfill, executor, sessions)
    log.info("backfill keeper (%s): %s", settings.executor, backfill.command)
    return start_keeper_thread(keeper, backfill.interval_s, stop)


def _notify_settings(options: ServeOptions) -> NotifySettings | None:
    """The notifier's settings (None without the dispatcher, whose process sends)."""
    if not options.dispatcher:
        return None
    from jpushare.notify import load_notify_settings

    return load_notify_settings()


def _start_notifier(
    notify_settings: NotifySettings | None,
    sessions: sessionmaker[Session],
    stop: threading.Event,
    lock: Fence,
    metrics: ServiceMetrics,
) -> list[threading.Thread]:
    """The mail and webhook threads where they are set; they send only while this process
    leads (a standby replica's stay quiet), on the dispatcher's own database pool."""
    if notify_settings is None or not notify_settings.enabled:
        return []
    from jpushare.notify import start_notifier

    return start_notifier(
        notify_settings, sessions, stop, may_act=lock.may_act, count=metrics.count_notification
    )


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def with_overrides(settings: Settings, host: str | None, port: int | None) -> Settings:
    """Settings with the command line's --host / --port applied."""
    out = settings
    if host is not None:
        out = replace(out, host=host)
    if port is not None:
        out = replace(out, port=port)
    return out
