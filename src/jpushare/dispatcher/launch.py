"""Steps 5 and 6 of a dispatcher cycle: launch what the store recorded, then confirm or fail them.

5. Per recorded dispatch: tell the LLM router to yield (fire-and-forget), then
   `executor.submit` (idempotent by (job id, attempt)).
6. The accepted runs' executor ids in ONE transaction after the last submit (one batched
   statement for all, `store.confirm_dispatches`); `SubmitRefused` → the job FAILED with
   the executor's reason (a refused sbatch leaves no job behind); any other error
   (executor unreachable, sbatch timed out) → nothing: the job stays DISPATCHED and the
   next cycle's observe finds its run (confirm) or none (submit again), so a job is
   neither lost nor started twice. A run accepted for a job that ended meanwhile (a
   cancel through the API) is stopped at once.

The same two steps start the jobs that observe found DISPATCHED without a run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from jpushare import store
from jpushare.dispatcher.crash_points import crash_point
from jpushare.dispatcher.cycle_deps import CycleDeps
from jpushare.dispatcher.job_ids import job_id
from jpushare.executors.base import LaunchSpec, PlansGpus, SubmitRefused
from jpushare.llm_router import NoRouter
from jpushare.store.observations import job_states
from jpushare.store.records import DispatchedJob
from jpushare.vocabulary import ACTIVE_STATES

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What steps 5-6 did with the dispatches of one cycle."""

    started: tuple[int, ...] = ()  # job ids the executor accepted
    refused: tuple[tuple[int, str], ...] = ()  # (job id, reason): now FAILED
    deferred: tuple[int, ...] = ()  # executor error: left DISPATCHED for the next observe
    orphaned: tuple[int, ...] = ()  # accepted, but the job had ended meanwhile: run stopped


@dataclass(frozen=True, slots=True)
class _Launch:
    row: int  # the job's id in the store
    tier: str
    spec: LaunchSpec


def launch(deps: CycleDeps, dispatched: Iterable[DispatchedJob], now: datetime) -> Outcome:
    """Steps 5 and 6 for these recorded dispatches (module docstring), stamped with the
    cycle's `now`.

    A refusal fails its job at once (its own transaction). The accepted runs are confirmed
    in one transaction after the last submit: a crash before it leaves them DISPATCHED
    without an executor id, which the next observe confirms (the runs exist).
    """
    refused: list[tuple[int, str]] = []
    deferred: list[int] = []
    accepted: list[tuple[_Launch, str]] = []
    for launch in (_launch_of(deps, row) for row in dispatched):
        spec = launch.spec
        deps.check_may_act()
        # 5. SPEC §6: the router stops LLM backfill there (on the job's own GPUs where the
        # executor knows them); we do not wait for it.
        deps.router.request_yield(
            spec.node, launch.tier, spec.num_gpus, spec.job_id, gpus=_planned(deps, spec)
        )
        try:
            executor_id = deps.executor.submit(spec)
        except SubmitRefused as exc:
            reason = f"the executor refused the job: {exc}"
            with deps.begin() as session:
                store.fail_dispatch(session, launch.row, now, reason=reason, attempt=spec.attempt)
            log.warning("job %s refused: %s", spec.job_id, exc)
            refused.append((launch.row, reason))
            continue
        except Exception as exc:  # unreachable / timed out: the next observe reconciles
            log.error(
                "job %s: submit failed, left DISPATCHED for the next cycle: %s", spec.job_id, exc
            )
            deferred.append(launch.row)
            continue
        crash_point("after_submit")
        accepted.append((launch, executor_id))
    if not accepted:
        return Outcome((), tuple(refused), tuple(deferred), ())
    started, orphaned = _confirm(deps, accepted, now)
    return Outcome(started, tuple(refused), tuple(deferred), orphaned)


def _confirm(
    deps: CycleDeps, accepted: list[tuple[_Launch, str]], now: datetime
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """6. Confirm the accepted runs: (started, orphaned). A run not confirmed because its
    job left DISPATCHED meanwhile (cancelled through the API) must not live on."""
    started: list[int] = []
    orphans: list[tuple[_Launch, str]] = []
    with deps.begin() as session:
        confirmed = store.confirm_dispatches(
            session,
            [(launch.row, launch.spec.attempt, eid) for launch, eid in accepted],
            now,
        )
        for launch, executor_id in accepted:
            if launch.row in confirmed:
                started.append(launch.row)
            else:
                orphans.append((launch, executor_id))
        states = job_states(session, [launch.row for launch, _ in orphans])
    for launch, executor_id in accepted:
        spec = launch.spec
        if launch.row in started:
            log.info(
                "job %s attempt %d started on %s/%s x%d as %s",
                spec.job_id,
                spec.attempt,
                spec.node,
                launch.tier,
                spec.num_gpus,
                executor_id,
            )
    orphaned: list[int] = []
    for launch, executor_id in orphans:
        state, attempt = states.get(launch.row, ("", 0))
        if state in ACTIVE_STATES and attempt == launch.spec.attempt:
            started.append(launch.row)  # an earlier cycle confirmed it already
            continue
        log.info("job %d ended before its run was confirmed: stopping %s", launch.row, executor_id)
        deps.check_may_act()
        try:
            deps.executor.cancel(executor_id)
        except Exception as exc:  # the next observe finds it stale and retries
            log.warning("could not stop run %s: %s", executor_id, exc)
        orphaned.append(launch.row)
    return tuple(started), tuple(orphaned)


def _planned(deps: CycleDeps, spec: LaunchSpec) -> list[int] | None:
    """The GPU indices the executor will give the job, where it picks them (local) and a
    router is there to be told (planning reads every run's record under the executor's lock:
    not done for nothing on each dispatch)."""
    if isinstance(deps.router, NoRouter) or not isinstance(deps.executor, PlansGpus):
        return None
    try:
        return deps.executor.planned_gpus(spec)
    except Exception as exc:  # a hint for the router: never a reason not to dispatch
        log.warning("job %s: its GPUs could not be planned: %s", spec.job_id, exc)
        return None


def _launch_of(deps: CycleDeps, row: DispatchedJob) -> _Launch:
    return _Launch(
        row.job_id,
        row.tier,
        LaunchSpec(
            job_id=job_id(row.job_id),
            attempt=row.attempt,
            name=row.name,
            command=row.command,
            node=row.node,
            gpu_type=row.tier,
            num_gpus=row.num_gpus,
            partition=row.partition,
            user=row.user_name,
            time_limit_s=row.time_limit_s,
            unix_user=row.unix_user,
            workdir=row.workdir,
            environment=row.environment,
            output=row.output_path,
            error=row.error_path,
            cpus_per_gpu=row.cpus_per_gpu,
            mem_per_gpu_mb=row.mem_per_gpu_mb,
        ),
    )
