"""`jpushare squeue`: running and queued jobs together, in squeue's columns and short state
names (R running, CF dispatched and starting, PD queued), the queued ones in fair-share
order with their reason (the `why` code) where squeue prints NODELIST(REASON), then the
held and waiting ones (HELD, DEPENDENCY, ARRAY_LIMIT, DEPENDENCY_NEVER_SATISFIED). `--me` and
`-u USER` select as squeue's, `-j ID[,ID…]` too (an array's ID: its every task); `queue
--me`/`-u`/`ID…` use the same selection. An array's task shows as `ID_TASK`."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, TextIO

from jpushare.client.formatting import duration, table
from jpushare.client.job_commands import elapsed_s
from jpushare.vocabulary import JobState

if TYPE_CHECKING:
    from jpushare.client.api import JSON, Client

SHORT_STATES = {JobState.RUNNING: "R", JobState.DISPATCHED: "CF", JobState.GLOBAL_QUEUE_WAIT: "PD"}
ALL_QUEUED = 10_000  # the API's most per page of the queue


def _jobs(
    api: Client, states: Sequence[str], args: argparse.Namespace, waiting: bool | None = None
) -> Iterator[JSON]:
    before: int | None = None
    while True:
        page = api.jobs(
            states=states,
            mine=bool(args.me),
            user=args.user,
            before_id=before,
            limit=1000,
            waiting=waiting,
        )
        yield from page["data"]
        before = page.get("next_before_id")
        if before is None:
            return


def selected_queue(api: Client, args: argparse.Namespace, limit: int) -> JSON:
    """The queue (`api.queue`), only the caller's (`--me`), a user's (`-u`) or these jobs'
    (`args.jobs`) entries when asked, at most `limit` of them; `queue_length` stays the
    whole queue's."""
    only = set(getattr(args, "jobs", None) or ())  # job ids (job_refs made them so)
    if not (args.me or args.user or only):
        result: JSON = api.queue(limit=limit)
        return result
    queue = api.queue(limit=ALL_QUEUED)
    if only:
        queue = {**queue, "data": [e for e in queue["data"] if e["job_id"] in only]}
    if not (args.me or args.user):
        kept = queue["data"]
    elif args.me:
        mine = {j["id"] for j in _jobs(api, [JobState.GLOBAL_QUEUE_WAIT], args)}
        kept = [e for e in queue["data"] if e["job_id"] in mine]
    else:
        kept = [e for e in queue["data"] if e["user"] == args.user]
    return {**queue, "data": kept[:limit], "selected": len(kept)}


def squeue(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    only = set(args.jobs or ())

    def chosen(j: JSON) -> bool:
        return not only or j["id"] in only

    running = sorted(
        filter(chosen, _jobs(api, [JobState.RUNNING, JobState.DISPATCHED], args)),
        key=lambda j: j["id"],
    )
    queued = selected_queue(api, args, ALL_QUEUED)["data"]
    # Held and waiting jobs are queued outside the fair-share order: after it, by id.
    waiting = sorted(
        filter(chosen, _jobs(api, [JobState.GLOBAL_QUEUE_WAIT], args, waiting=True)),
        key=lambda j: j["id"],
    )
    answer: JSON = {"running": running, "queued": queued, "waiting": waiting}
    if args.json:
        return answer
    rows: list[tuple[object, ...]] = [
        (
            j.get("display_id") or j["id"],
            j.get("tier") or "-",
            j["name"],
            j["user"],
            SHORT_STATES.get(j["state"], j["state"]),
            duration(elapsed_s(j, now)) if j["state"] == JobState.RUNNING else "0:00",
            j["num_gpus"],
            j.get("node") or "-",
        )
        for j in running
    ]
    rows += [
        (
            e.get("display_id") or e["job_id"],
            e.get("min_tier") or "-",
            e["name"],
            e["user"],
            "PD",
            "0:00",
            e["num_gpus"],
            f"({e['code']})",
        )
        for e in queued
    ]
    rows += [
        (
            j.get("display_id") or j["id"],
            j.get("min_tier") or "-",
            j["name"],
            j["user"],
            "PD",
            "0:00",
            j["num_gpus"],
            f"({j['waiting']})",
        )
        for j in waiting
    ]
    headers = ("JOBID", "TIER", "NAME", "USER", "ST", "TIME", "GPUS", "NODELIST(REASON)")
    print(table(headers, rows), file=out)
    return answer


def add_user_selection(p: argparse.ArgumentParser) -> None:
    """squeue's `--me` and `-u/--user USER`."""
    who = p.add_mutually_exclusive_group()
    who.add_argument("--me", action="store_true", help="only my jobs (squeue --me)")
    who.add_argument("--user", "-u", metavar="U", help="only this user's jobs")
