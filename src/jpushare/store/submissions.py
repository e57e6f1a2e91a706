"""Submitting jobs: the SPEC §2 fit check, the dependency and array a submission asks
for, and the job's insert with its `submitted` event."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, bindparam, func, insert, or_, select, true, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import BindParameter

from jpushare.ledger.eligibility import MAX_DEPENDENCY_JOBS, Dependency, Term, parse_dependency
from jpushare.ledger.job_arrays import DEFAULT_ARRAY_OUTPUT, task_environment, task_pattern
from jpushare.policy.fit import MAX_GPUS, MIN_GPUS, check_fit, default_min_sort_order
from jpushare.policy.model import Placement, Tier
from jpushare.run_settings import JobRun, checked
from jpushare.store.errors import InvalidRequest, NoFitPlacement, NotFound
from jpushare.store.inventory import POLICY_TIER_COLUMNS
from jpushare.store.job_names import default_job_name
from jpushare.store.jobs import JOB_COLUMNS, get_jobs, job_record
from jpushare.store.lifecycle import cancel_job
from jpushare.store.quotas import check_quota, job_bytes
from jpushare.store.records import JobRecord
from jpushare.store.schema import (
    EventKind,
    GpuResource,
    GpuTier,
    Job,
    JobEvent,
    JobState,
    Lab,
    Node,
    User,
)
from jpushare.store.waiting_jobs import refresh_waiting
from jpushare.vocabulary import Waiting


@dataclass(frozen=True, slots=True)
class Submission:
    """A submitted job, and the tier names its answer shows (sort order -> tier name, the
    same map as the API's `tier_names_by_sort_order`), read in the same statement. An
    array's `job` is its first task, `tasks` every task (one job: that job)."""

    job: JobRecord
    tier_names_by_sort_order: dict[int, str]
    tasks: tuple[JobRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class Eligibility:
    """What a submission asks beyond the job (`ledger.eligibility`): sbatch's --hold,
    --dependency (as typed: `afterok:12:13_2`), --kill-on-invalid-dep, and --array (the
    task ids, sorted, and the `%K` throttle)."""

    hold: bool = False
    dependency: str | None = None
    kill_on_invalid_dep: bool = False
    array_tasks: tuple[int, ...] | None = None
    array_limit: int | None = None


def resolve_dependency(session: Session, text: str) -> str:
    """The dependency with each id made the jobs it names (an array: every task; `A_T`:
    that task), as stored; InvalidRequest if it is not one or names a job there is none
    of. Only jobs that exist can be named, so no dependency can ever form a cycle."""
    try:
        dep = parse_dependency(text)
    except ValueError as exc:
        raise InvalidRequest(f"dependency: {exc}") from None
    typed = {i for t in dep.terms for i in t.ids}
    plain = {int(i) for i in typed if "_" not in i}
    heads = {int(i.split("_")[0]) for i in typed}
    tasks: dict[int, dict[int, int]] = defaultdict(dict)  # array id -> task -> job id
    found: set[int] = set()
    for jid, array, task in session.execute(
        select(Job.id, Job.array_job_id, Job.array_task_id).where(
            or_(Job.id.in_(plain), Job.array_job_id.in_(heads))
        )
    ):
        found.add(jid)
        if array is not None and array in heads and task is not None:
            tasks[array][task] = jid
    terms = []
    for term in dep.terms:
        ids: list[int] = []
        for i in term.ids:
            head_text, _, task_text = i.partition("_")
            head = int(head_text)
            if task_text:
                task_job = tasks.get(head, {}).get(int(task_text))
                if task_job is None:
                    raise InvalidRequest(f"dependency: there is no job {i}")
                ids.append(task_job)
            elif head in tasks:
                ids.extend(tasks[head][t] for t in sorted(tasks[head]))
            elif head in found:
                ids.append(head)
            else:
                raise InvalidRequest(f"dependency: there is no job {head}")
        unique = list(dict.fromkeys(ids))
        if len(unique) > MAX_DEPENDENCY_JOBS:
            raise InvalidRequest(
                f"dependency: {term.kind} names {len(unique)} jobs, at most "
                f"{MAX_DEPENDENCY_JOBS} may be named"
            )
        terms.append(Term(term.kind, tuple(str(j) for j in unique)))
    return Dependency(tuple(terms), dep.any_of, dep.singleton).text()


# What the SPEC §2 check and the new job's record need, in one statement: the user's lab
# and names, every tier, and every placement's capacity (schedulable GPUs per node and
# tier, as `inventory.placements` counts them). One row per (tier, placement); a tier
# without placements once, with NULL node; one row with NULL tier when there is no tier;
# no row when there is no such user.
_capacity = (
    select(GpuResource.node_name, GpuResource.tier_id, func.count().label("capacity"))
    .join(Node, Node.name == GpuResource.node_name)
    .where(GpuResource.schedulable.is_(True))
    .group_by(GpuResource.node_name, GpuResource.tier_id)
    .subquery("capacity")
)
_SUBMIT_INPUTS = (
    select(
        User.lab_id,
        User.name,
        Lab.name,
        *POLICY_TIER_COLUMNS,
        _capacity.c.node_name,
        _capacity.c.capacity,
    )
    .select_from(User)
    .join(Lab, Lab.id == User.lab_id)
    .outerjoin(GpuTier, true())
    .outerjoin(_capacity, _capacity.c.tier_id == GpuTier.id)
    .where(User.id == bindparam("user_id"))
)

# With a quota: the same, locking the user's row (PostgreSQL; SQLite's BEGIN IMMEDIATE
# already serializes writers), so that one user's submissions count their jobs one at a time.
_SUBMIT_INPUTS_LOCKED = _SUBMIT_INPUTS.with_for_update(of=User)


_NEW_JOB_VALUES: dict[str, BindParameter[Any]] = {
    name: bindparam(name)
    for name in (
        "name",
        "command",
        "user_id",
        "lab_id",
        "num_gpus",
        "minimum_tier_sort_order",
        "time_limit_s",
        "state",
        "submitted_at",
        "queue_entered_at",
        "attempts",
        "run_cost",
        "charged_tflop_s",
        "reserved_gpus",
        "reservation_gpu_seconds",
        "workdir",
        "environment",
        "output_path",
        "error_path",
        "cpus_per_gpu",
        "mem_per_gpu_mb",
        "waiting",
        "held",
        "dependency",
        "kill_on_invalid_dep",
        "array_job_id",
        "array_task_id",
        "array_limit",
    )
}
_INSERT_JOB = insert(Job).values(_NEW_JOB_VALUES).returning(*JOB_COLUMNS)
_INSERT_EVENT = insert(JobEvent).values(
    job_id=bindparam("job_id"),
    at=bindparam("event_at"),
    kind=bindparam("event_kind"),
    to_state=bindparam("event_to_state"),
    detail=bindparam("event_detail"),
)


def _insert_job_and_event() -> Select[Any]:
    """PostgreSQL: the job and its `submitted` event in one round trip (a data-modifying
    CTE); the job's row comes back."""
    new_job = _INSERT_JOB.cte("new_job")
    event_values = select(
        new_job.c.id,
        bindparam("event_at", type_=JobEvent.__table__.c.at.type),
        bindparam("event_kind", type_=JobEvent.__table__.c.kind.type),
        bindparam("event_to_state", type_=JobEvent.__table__.c.to_state.type),
        bindparam("event_detail", type_=JobEvent.__table__.c.detail.type),
    )
    new_event = (
        insert(JobEvent)
        .from_select(["job_id", "at", "kind", "to_state", "detail"], event_values)
        .cte("new_event")
    )
    return select(*(new_job.c[c.name] for c in JOB_COLUMNS)).add_cte(new_event)


_INSERT_JOB_AND_EVENT = _insert_job_and_event()


def submit(
    session: Session,
    *,
    user_id: int,
    name: str,
    command: str,
    num_gpus: int,
    now: datetime,
    min_tier: str | None = None,
    time_limit_s: float | None = None,
    run: JobRun | None = None,
    max_active_jobs: int | None = None,
    max_job_bytes: int | None = None,
    eligibility: Eligibility | None = None,
) -> Submission:
    """Queue a job for the user's lab, after the SPEC §2 checks; the job, with the tier names
    its public form needs.

    Raises InvalidRequest (num_gpus outside 1-8, unknown tier, empty command), NotFound
    (no such user) or NoFitPlacement (no placement can ever hold it; nothing is stored).
    The fit check reads the inventory in the same transaction as the insert. Statements: one
    read (user, tiers, placement capacities), then on PostgreSQL one INSERT of the job and
    its `submitted` event together, on SQLite two INSERTs.

    `max_active_jobs` / `max_job_bytes`: the user's limits on jobs that have not ended and
    on their stored command + environment bytes (None: no limit); QuotaExceeded beyond
    them. Checked with one more read, after the first locked the user's row, in the
    insert's transaction: two submissions of one user cannot both pass.

    `eligibility`: a hold, a dependency, an array (one job per task, in this transaction;
    each task's `array_job_id` is the first task's id, as Slurm's ArrayJobId). A job that
    is not eligible at once is stored with its `waiting` reason (`waiting_jobs`).
    """
    elig = eligibility or Eligibility()
    tasks: tuple[int | None, ...] = elig.array_tasks or (None,)
    if not MIN_GPUS <= num_gpus <= MAX_GPUS:
        raise InvalidRequest(f"num_gpus must be {MIN_GPUS}-{MAX_GPUS}, got {num_gpus}")
    if not command.strip():
        raise InvalidRequest("a job needs a command")
    if time_limit_s is not None and time_limit_s <= 0:
        raise InvalidRequest(f"time_limit_s must be positive, got {time_limit_s}")
    try:
        run = checked(run or JobRun())
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc
    session.flush()  # Core statements below: make pending ORM changes visible first
    connection = session.connection()
    quota = max_active_jobs is not None or max_job_bytes is not None
    inputs = _SUBMIT_INPUTS_LOCKED if quota else _SUBMIT_INPUTS
    rows = connection.execute(inputs, {"user_id": user_id}).all()
    if not rows:
        raise NotFound("user", user_id)
    lab_id, user_name, lab_name = rows[0][0], rows[0][1], rows[0][2]
    if quota:
        adding = job_bytes(command, run.environment) * len(tasks)
        check_quota(
            connection, user_id, user_name, adding, max_active_jobs, max_job_bytes, len(tasks)
        )
    by_name: dict[str, Tier] = {}
    capacities: list[Placement] = []
    for row in rows:
        tier_name = row[3]
        if tier_name is None:
            continue
        if tier_name not in by_name:
            by_name[tier_name] = Tier(*row[3:9])
        if row[9] is not None:
            capacities.append(Placement(row[9], tier_name, row[10]))
    # The order `policy_tiers` gives (strongest first, then by name): check_fit's choice
    # among tiers of equal sort order depends on it.
    tiers = sorted(by_name.values(), key=lambda t: (-t.sort_order, t.name))
    tier_names: dict[int, str] = {}
    for t in sorted(tiers, key=lambda t: t.name):
        tier_names.setdefault(t.sort_order, t.name)
    if min_tier is not None:
        if min_tier not in by_name:
            known = ", ".join(sorted(by_name)) or "none"
            raise InvalidRequest(f"unknown tier {min_tier!r} (tiers: {known})")
        min_sort_order = by_name[min_tier].sort_order
    else:
        try:
            min_sort_order = default_min_sort_order(tiers)
        except ValueError:  # no auto-assign tier: check_fit below says nothing fits
            min_sort_order = 0
    report = check_fit(num_gpus, min_sort_order, tiers, capacities)
    if not report.ok:
        raise NoFitPlacement(report)
    dependency = resolve_dependency(session, elig.dependency) if elig.dependency else None
    params: dict[str, Any] = {
        "name": name.strip() or default_job_name(command),
        "command": command,
        "user_id": user_id,
        "lab_id": lab_id,
        "num_gpus": num_gpus,
        "minimum_tier_sort_order": min_sort_order,
        "time_limit_s": time_limit_s,
        "state": JobState.GLOBAL_QUEUE_WAIT.value,
        "submitted_at": now,
        "queue_entered_at": now,
        "attempts": 0,
        "run_cost": 0.0,
        "charged_tflop_s": 0.0,
        "reserved_gpus": 0,
        "reservation_gpu_seconds": 0.0,
        "workdir": run.workdir,
        "environment": None if run.environment is None else dict(run.environment),
        "output_path": run.output_path,
        "error_path": run.error_path,
        "cpus_per_gpu": run.cpus_per_gpu,
        "mem_per_gpu_mb": run.mem_per_gpu_mb,
        "held": elig.hold,
        "dependency": dependency,
        "kill_on_invalid_dep": elig.kill_on_invalid_dep,
        "array_limit": elig.array_limit if elig.array_tasks else None,
        "event_at": now,
        "event_kind": EventKind.SUBMITTED.value,
        "event_to_state": JobState.GLOBAL_QUEUE_WAIT.value,
        "event_detail": {
            "num_gpus": num_gpus,
            "min_tier": report.min_tier,
            "minimum_tier_sort_order": min_sort_order,
            "fit_placements": report.fit_count,
        },
    }
    if dependency is not None or elig.array_tasks:
        params["event_detail"] = {**params["event_detail"], "dependency": dependency}
    rows_out = []
    array_id: int | None = None
    for index, task in enumerate(tasks):
        task_params = {**params, "array_task_id": task, "array_job_id": array_id}
        task_params["waiting"] = _initial_waiting(elig, dependency, index)
        if task is not None and array_id is not None:
            task_params |= _task_run(run, array_id, task, elig.array_tasks or ())
            task_params["event_detail"] = {**params["event_detail"], "array_task_id": task}
        if connection.dialect.name == "postgresql":
            row = connection.execute(_INSERT_JOB_AND_EVENT, task_params).one()
        else:
            row = connection.execute(_INSERT_JOB, task_params).one()
            connection.execute(_INSERT_EVENT, {**task_params, "job_id": row._mapping["id"]})
        rows_out.append(row)
        if task is not None and array_id is None:  # the first task: its id names the array
            array_id = row._mapping["id"]
            first = _task_run(run, array_id, task, elig.array_tasks or ())
            connection.execute(
                update(Job).where(Job.id == array_id).values(array_job_id=array_id, **first)
            )
    ids = [row._mapping["id"] for row in rows_out]
    judged = [i for i, r in zip(ids, rows_out, strict=True) if r._mapping["waiting"] == _DEP]
    if judged or elig.array_tasks:
        refreshed = refresh_waiting(session, now, judged) if judged else None
        for job_id, why in refreshed.to_cancel if refreshed else ():
            cancel_job(session, job_id, now, reason=why)
        records = get_jobs(session, ids)
        out = tuple(records[i] for i in ids)
        return Submission(out[0], tier_names, out)
    # A new job has no placement and no reservation: no tier names.
    record = job_record(
        rows_out[0]._mapping,
        user_name=user_name,
        lab_name=lab_name,
        tier_name=None,
        reserved_tier_name=None,
    )
    return Submission(record, tier_names, (record,))


_DEP = Waiting.DEPENDENCY.value


def _task_run(run: JobRun, array_id: int, task: int, tasks: tuple[int, ...]) -> dict[str, Any]:
    """An array task's environment (SLURM_ARRAY_* and JPUSHARE_ARRAY_*) and output names
    (`%A`, `%a` expanded as sbatch does in an array)."""
    output = run.output_path if run.output_path is not None else DEFAULT_ARRAY_OUTPUT
    return {
        "environment": task_environment(run.environment, array_id, task, tasks),
        "output_path": task_pattern(output, array_id, task),
        "error_path": None
        if run.error_path is None
        else task_pattern(run.error_path, array_id, task),
    }


def _initial_waiting(elig: Eligibility, dependency: str | None, index: int) -> str | None:
    """A new job's `waiting` before it is judged: held, a dependency to judge now, or its
    array's throttle (the first K tasks are eligible)."""
    if elig.hold:
        return Waiting.HELD.value
    if dependency is not None:
        return _DEP
    if elig.array_tasks and elig.array_limit is not None and index >= elig.array_limit:
        return Waiting.ARRAY_LIMIT.value
    return None
