"""Job ids as a Slurm user types them: `ID` or `ID_TASK` (an array's task), made the API's
job ids before a command runs. Where a command takes several jobs (cancel, hold, release,
wait), an array's `ID` is every task, as scancel reads it; where it takes one (show, why,
log, update), `ID` is that job (an array's first task)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from jpushare.client.arguments import JobRef, UsageError

if TYPE_CHECKING:
    from jpushare.client.api import Client


def resolve(api: Client, ref: JobRef | int, *, every_task: bool) -> list[int]:
    """The job ids `ref` names (one request for an array's task or a list's id; none for
    one plain id)."""
    if isinstance(ref, int):
        return [ref]
    if ref.task is None and not every_task:
        return [ref.job]
    tasks = api.array_tasks(ref.job)
    if ref.task is None:
        return sorted(t["id"] for t in tasks) if tasks else [ref.job]
    found = [t["id"] for t in tasks if t.get("array_task_id") == ref.task]
    if not found:
        raise UsageError(f"there is no job {ref} (no task {ref.task} in an array {ref.job})")
    return found


def resolve_args(api: Client, args: argparse.Namespace) -> None:
    """Make `args.job` / `args.jobs` job ids (in place), as the module docstring says."""
    job = getattr(args, "job", None)
    if isinstance(job, JobRef):
        args.job = resolve(api, job, every_task=False)[0]
    jobs = getattr(args, "jobs", None)
    if isinstance(jobs, list) and any(isinstance(j, JobRef) for j in jobs):
        args.jobs = [i for ref in jobs for i in resolve(api, ref, every_task=True)]
