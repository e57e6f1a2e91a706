"""`hold`, `release` and `update` (scontrol hold / release / update): each job by the API's
own route, one after the other, with cancel's permission (a student their own jobs, a PI
their lab's, an admin any); a refusal is one `error CODE: …` line and exit 1, as for
`cancel JOB…`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, TextIO

from jpushare.client.formatting import clean

if TYPE_CHECKING:
    from jpushare.client.api import JSON, Client


def _each(
    api: Client, ids: list[int], call: Callable[[int], JSON], verb: str, args: argparse.Namespace,
    out: TextIO,
) -> JSON:  # fmt: skip
    from jpushare.client.api import ApiError
    from jpushare.client.job_commands import PartlyRefused

    done: list[JSON] = []
    refused: list[JSON] = []
    for job_id in dict.fromkeys(ids):
        try:
            job = call(job_id)
        except ApiError as exc:
            if exc.code == "UNREACHABLE":
                raise
            refused.append({"id": job_id, "code": exc.code, "message": exc.message})
            continue
        done.append(job)
        if not args.json:
            print(f"{verb} job {job.get('display_id') or job['id']} ({clean(job['name'])})"
                  + _waiting(job), file=out)  # fmt: skip
    for r in refused:
        print(f"error {clean(r['code'])}: {clean(r['message'])}", file=sys.stderr)
    answer: JSON = {"data": done, "refused": refused}
    if refused:
        raise PartlyRefused(answer)
    return answer


def _waiting(job: JSON) -> str:
    if job.get("state") != "GLOBAL_QUEUE_WAIT":
        return ""
    waiting = job.get("waiting")
    return f": {waiting}" if waiting else ": in the queue"


def hold(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    """Hold queued jobs: out of the queue until released."""
    return _each(api, args.jobs, api.hold, "held", args, out)


def release(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    """Release held jobs: they queue from now (or wait for their dependency)."""
    return _each(api, args.jobs, api.release, "released", args, out)


def update(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    """Change a queued job's name or time limit; an array's ID changes every task still
    queued (as scontrol update on an ArrayJobId), ID_TASK that task."""
    from jpushare.client.arguments import UsageError
    from jpushare.client.job_refs import resolve

    changes: JSON = {}
    if args.name is not None:
        changes["name"] = args.name
    if args.time_limit is not None:
        changes["time_limit_s"] = args.time_limit
    if not changes:
        raise UsageError("update needs --name or --time-limit")
    ref = args.target
    ids = resolve(api, ref, every_task=False)
    if ref.task is None:
        tasks = api.array_tasks(ref.job)
        queued = [t["id"] for t in tasks if t.get("state") == "GLOBAL_QUEUE_WAIT"]
        ids = sorted(queued) or ids  # none queued: the API says why the first can't change
    return _each(api, ids, lambda j: api.update(j, changes), "updated", args, out)


def register(add: Callable[..., argparse.ArgumentParser], job_ref: Callable[[str], object],
             time_limit: Callable[[str], float]) -> None:  # fmt: skip
    """Add `hold`, `release`, `update` with the client CLI's `add`."""
    for name, printer, text in (
        ("hold", hold, "hold queued jobs: out of the queue until released"),
        ("release", release, "release held jobs: they queue from now"),
    ):
        p = add(name, printer, text)
        p.add_argument("jobs", type=job_ref, nargs="+", metavar="JOB",
                       help="job ids: ID (an array: every task) or ID_TASK")  # fmt: skip
    p = add("update", update, "change a queued job's (or array's) --name or --time-limit")
    p.add_argument("target", type=job_ref, metavar="JOB",
                   help="the job: ID (an array: every queued task) or ID_TASK")  # fmt: skip
    p.add_argument("--name", "--job-name", "-J", metavar="NAME", help="its new name")
    p.add_argument("--time-limit", "--time", "-t", type=time_limit, metavar="TIME",
                   dest="time_limit", help="its new limit, as sbatch --time")  # fmt: skip
