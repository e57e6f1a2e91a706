"""`jpushare backfill`: the backfill keeper as a service of its own, beside `serve`.

It builds the same local executor `serve` does (same state directory, same GPUs), reads
the reservations held now from the database each tick (so its GPU-hours split reserved
from idle GPUs) and runs `backfill.keeper.Keeper` until SIGINT / SIGTERM, when it stops its
servers. `serve` runs the same keeper on a thread of its own when JPUSHARE_BACKFILL_COMMAND
is set (`make run`), so one process does it all on a workstation.

On Slurm (JPUSHARE_EXECUTOR=slurm) it runs `backfill.slurm_keeper.SlurmKeeper`: the
servers are jobs of the backfill partition (JPUSHARE_SLURM_BACKFILL_PARTITION) that
research jobs preempt, as many per placement as JPU-Share reports idle or reserved GPU
groups (`wanted_from`, read from the database each tick).
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.api.metric_figures import placement_counts
from jpushare.backfill.keeper import Keeper, ReservedGpus, stop_on_signals
from jpushare.backfill.slurm_keeper import SlurmKeeper, Want, Wanted
from jpushare.config import BackfillSettings, ConfigError, Settings
from jpushare.executors.local import LocalExecutor
from jpushare.executors.slurm import SlurmExecutor
from jpushare.store.observations import load_observed_busy
from jpushare.store.reservations import held_reservations, reserved_by_placement

log = logging.getLogger(__name__)


def reserved_from(sessions: sessionmaker[Session]) -> ReservedGpus:
    """GPUs reserved now per (node, tier), read from the database; {} when it cannot be."""

    def read() -> dict[tuple[str, str], int]:
        try:
            with sessions.begin() as session:
                return reserved_by_placement(held_reservations(session))
        except Exception as exc:  # the split is a figure: a database hiccup must not stop it
            log.warning("backfill: reservations could not be read: %s", exc)
            return {}

    return read


def wanted_from(sessions: sessionmaker[Session]) -> Wanted:
    """Per placement: its GPUs, and those idle or reserved on an open node now (what
    GET /v1/placements calls `llm_backfill_gpus`). A database error propagates: that tick
    is skipped (nothing submitted, nothing cancelled) and the next one tries again."""

    def read() -> dict[tuple[str, str], Want]:
        with sessions.begin() as session:
            reserved = reserved_by_placement(held_reservations(session))
            out: dict[tuple[str, str], Want] = {}
            for p in store.placements(session, load_observed_busy(session)):
                counts = placement_counts(p, reserved.get(p.key, 0))
                free = counts.idle + counts.reserved if p.schedulable else 0
                out[p.key] = Want(p.capacity, free, counts.reserved if p.schedulable else 0)
            return out

    return read


def keeper_for(
    settings: Settings,
    backfill: BackfillSettings,
    executor: object,
    sessions: sessionmaker[Session],
) -> Keeper | SlurmKeeper:
    if settings.executor == "slurm" and isinstance(executor, SlurmExecutor):
        if executor.backfill is None:
            raise ConfigError(
                "jpushare backfill on Slurm needs a backfill partition that research jobs "
                "preempt: set JPUSHARE_SLURM_BACKFILL_PARTITION (README, LLM backfill)"
            )
        return SlurmKeeper(executor, backfill, wanted=wanted_from(sessions))
    if settings.executor != "local" or not isinstance(executor, LocalExecutor):
        raise ConfigError("jpushare backfill keeps servers for the local or the Slurm executor")
    return Keeper(executor, backfill, reserved=reserved_from(sessions))


def start_keeper_thread(
    keeper: Keeper | SlurmKeeper, interval_s: float, stop: threading.Event
) -> threading.Thread:
    """The keeper on a daemon thread of `serve` (it stops its servers when `stop` is set)."""
    thread = threading.Thread(
        target=keeper.run, args=(interval_s, stop), name="backfill-keeper", daemon=True
    )
    thread.start()
    return thread


def run_keeper(settings: Settings, backfill: BackfillSettings) -> int:
    """Run the keeper in this process until SIGINT / SIGTERM."""
    from jpushare.service.serve import _cluster_spec, build_executor

    engine = store.make_engine(settings.database_url)
    sessions = store.make_sessionmaker(engine)
    try:
        executor = build_executor(settings, sessions, _cluster_spec(settings, False))
        keeper = keeper_for(settings, backfill, executor, sessions)
        log.info(
            "backfill keeper (%s): %s groups of %d GPU(s), ports from %d, grace %gs: %s",
            settings.executor,
            len(keeper.groups) if isinstance(keeper, Keeper) else "Slurm's",
            backfill.gpus_per_server,
            backfill.port_base,
            backfill.grace_s,
            backfill.command,
        )
        stop = threading.Event()
        with stop_on_signals(stop):
            keeper.run(backfill.interval_s, stop)
    finally:
        engine.dispose()
    return 0
