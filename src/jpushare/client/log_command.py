"""`jpushare log`: a job's output, once or followed (`--follow`, as `tail -f`: a queued
job's from when it starts). The caller's own job's output is printed as it is; another
user's through `formatting.clean_output` unless `--raw`."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, TextIO

from jpushare.client.formatting import clean_output
from jpushare.vocabulary import ACTIVE_STATES, JobState

if TYPE_CHECKING:
    from jpushare.client.api import JSON, Client

_LIVE = ACTIVE_STATES


def log(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    result = api.log(args.job, args.attempt, stderr=args.stderr)
    if args.json:
        return result
    if result["attempt"] == 0 and args.follow and result.get("state") == JobState.GLOBAL_QUEUE_WAIT:
        # as `tail -f` of a file not yet written: wait for the job to start (or end)
        print(f"(job {result['job_id']} is queued: waiting for it to start)", file=sys.stderr)
        while result["attempt"] == 0 and result.get("state") == JobState.GLOBAL_QUEUE_WAIT:
            time.sleep(args.poll)
            result = api.log(args.job, args.attempt, stderr=args.stderr)
    if result["attempt"] == 0:
        print(f"(job {result['job_id']} has not run yet: no log)", file=out)
        return result
    shown_as: Callable[[str], str] = str
    if not args.raw and not _is_mine(api, args.job):
        shown_as = clean_output
        print(
            f"(job {args.job} is another user's: its output is shown without control "
            "characters; --raw shows it as it is)",
            file=sys.stderr,
        )
    if not result["log"] and result.get("state") in _LIVE:
        print(f"(job {result['job_id']} has no output yet)", file=out, flush=True)
    _write(out, shown_as(result["log"]))
    if not args.follow:
        _end_line(out, result["log"])
        return result
    shown, last = result["log"], result["log"]
    while result.get("state") in _LIVE or result["log"]:
        time.sleep(args.poll)
        offset = result["next_offset"] if result.get("path") else 0
        result = api.log(args.job, result["attempt"], stderr=args.stderr, offset=offset)
        text = result["log"]
        if not result.get("path"):  # a job from before revision 0003: the whole tail again
            text = text[len(shown) :] if text.startswith(shown) else text
            shown = result["log"]
            result["log"] = text
        _write(out, shown_as(text))
        last = text or last
    _end_line(out, last)
    return result


def _is_mine(api: Client, job_id: int) -> bool:
    """Whether the caller submitted the job: the newest of their own jobs up to it is it."""
    page = api.jobs(mine=True, before_id=job_id + 1, limit=1)
    return any(j["id"] == job_id for j in page["data"])


def _write(out: TextIO, text: str) -> None:
    out.write(text)
    out.flush()


def _end_line(out: TextIO, text: str) -> None:
    if text and not text.endswith("\n"):
        out.write("\n")
