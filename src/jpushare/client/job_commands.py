"""The CLI's job-history commands: `show`, `jobs` (its columns and CSV), `cancel` of
several jobs, and `wait` (sacct, scontrol show job, scancel and a wait that Slurm lacks).

Printers take (api, args, out, now) like those of `jpushare.client.cli`, which registers
them. Bulk cancel is the API's single cancel repeated: each job is allowed or refused on
its own (`may_manage`), so the answer per job is exactly the one `cancel JOB` gives.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, TextIO

from jpushare import vocabulary
from jpushare.client.exit_codes import EXIT_OK, jobs_exit_code
from jpushare.client.formatting import (
    ago,
    amount,
    clean,
    csv_number,
    duration,
    parse_time,
    state_label,
    table,
)
from jpushare.vocabulary import JobState

if TYPE_CHECKING:
    from jpushare.client.api import JSON, Client

QUEUED = JobState.GLOBAL_QUEUE_WAIT
LIVE_STATES = vocabulary.ACTIVE_STATES  # DISPATCHED, RUNNING
ACTIVE_STATES = (QUEUED, *LIVE_STATES)

# `jobs --format csv`: one row per job, these columns in this order (a lab's monthly
# report reads them by name; new columns are only ever appended). Times are ISO 8601 UTC,
# empty when unknown; costs are TFLOP-seconds; elapsed_s is the run so far (or in all);
# fractional numbers have at most three decimals (`formatting.csv_number`).
CSV_COLUMNS: tuple[str, ...] = (
    "id",
    "name",
    "user",
    "lab",
    "state",
    "num_gpus",
    "min_tier",
    "node",
    "tier",
    "submitted_at",
    "started_at",
    "ended_at",
    "elapsed_s",
    "time_limit_s",
    "attempts",
    "exit_code",
    "reason",
    "run_cost_tflop_s",
    "reservation_cost_tflop_s",
    "charged_tflop_s",
)


def elapsed_s(job: JSON, now: datetime) -> float | None:
    """How long its current (or last) attempt has run: to now while it runs."""
    started = parse_time(job.get("started_at"))
    if started is None:
        return None
    ended = parse_time(job.get("ended_at"))
    if ended is None and job.get("state") != JobState.RUNNING:
        return None
    return max(0.0, ((ended or now) - started).total_seconds())


def time_left_s(job: JSON, now: datetime) -> float | None:
    """A running job's time limit less what it has run; None without a limit."""
    limit = job.get("time_limit_s")
    ran = elapsed_s(job, now)
    if limit is None or ran is None or job.get("state") != JobState.RUNNING:
        return None
    return max(0.0, float(limit) - ran)


def all_jobs(api: Client, args: argparse.Namespace, limit: int | None) -> Iterator[JSON]:
    """Every job the filters select, newest first, page by page (up to `limit`)."""
    before: int | None = None
    seen = 0
    while True:
        page_size = 1000 if limit is None else min(1000, limit - seen)
        page = api.jobs(
            states=args.state or (),
            lab=args.lab,
            mine=args.mine,
            user=args.user,
            name=args.name,
            since=args.since,
            until=args.until,
            before_id=before,
            limit=page_size,
        )
        yield from page["data"]
        seen += len(page["data"])
        before = page.get("next_before_id")
        if before is None or (limit is not None and seen >= limit):
            return


def jobs_table(jobs: Sequence[JSON], out: TextIO, now: datetime) -> None:
    rows = [
        (
            shown_id(j),
            j["name"],
            j["user"],
            j["lab"],
            j["num_gpus"],
            j.get("min_tier"),
            state_label(j["state"], j.get("reason"))
            + (f" ({j['waiting']})" if j.get("waiting") else ""),
            _where(j),
            ago(j["submitted_at"], now),
            duration(elapsed_s(j, now)),
            duration(time_left_s(j, now)),
            ago(j.get("ended_at"), now) if j.get("ended_at") else "-",
        )
        for j in jobs
    ]
    headers = ("ID", "NAME", "USER", "LAB", "GPUS", "MIN-TIER", "STATE", "WHERE", "SUBMITTED")
    print(table((*headers, "ELAPSED", "TIME-LEFT", "ENDED"), rows), file=out)
    if not rows:
        print("(no jobs)", file=out)


def jobs_csv(jobs: Sequence[JSON], out: TextIO, now: datetime) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for j in jobs:
        ran = elapsed_s(j, now)
        row = {**j, "elapsed_s": ran}
        writer.writerow([_csv_cell(row.get(c)) for c in CSV_COLUMNS])


def _csv_cell(value: object) -> object:
    """Numbers in the one CSV format (`csv_number`: 3 decimals); '' for unknown."""
    if value is None:
        return ""
    if isinstance(value, float):
        return csv_number(value)
    return value


def _where(job: JSON) -> str:
    if job.get("node"):
        return f"{job['node']}/{job.get('tier') or '?'}"
    res = job.get("reservation")
    if res:
        return f"reserving {res['gpus']}/{res['of']} on {res['node']}/{res['tier']}"
    return "-"


def _when(value: str | None, now: datetime) -> str:
    return "-" if not value else f"{value} ({ago(value, now)})"


def show(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    """`scontrol show job`: the job, then every attempt and reservation."""
    job = api.job(args.job)
    history = api.attempts(args.job)
    answer: JSON = {
        "job": job,
        "attempts": history["data"],
        "reservations": history["reservations"],
    }
    if args.json:
        return answer
    state = state_label(job["state"], job.get("reason"))
    if job.get("reason") and job["state"] in (JobState.FAILED, JobState.CANCELLED):
        state += f" ({job['reason']})"
    hidden = set(job.get("hidden") or ())
    lines = [
        f"job {shown_id(job)} ({job['name']}): {state}"
        + (f" ({job['waiting']})" if job.get("waiting") else ""),
        f"  user {job['user']}, lab {job['lab']}; {job['num_gpus']} GPU"
        f"{'s' if job['num_gpus'] != 1 else ''}, minimum tier {job.get('min_tier') or '-'}",
        "  command:   " + ("(hidden)" if "command" in hidden else str(job.get("command"))),
        "  directory: " + ("(hidden)" if "workdir" in hidden else str(job.get("workdir") or "-")),
        f"  submitted: {_when(job['submitted_at'], now)}",
        f"  started:   {_when(job.get('started_at'), now)}",
        f"  ended:     {_when(job.get('ended_at'), now)}",
        f"  elapsed:   {duration(elapsed_s(job, now))}; time limit "
        f"{duration(job.get('time_limit_s'))}; left {duration(time_left_s(job, now))}",
        f"  cost:      run {amount(job['run_cost_tflop_s'])} + reservation "
        f"{amount(job['reservation_cost_tflop_s'])} TFLOP-s; charged to the lab so far "
        f"{amount(job['charged_tflop_s'])}",
    ]
    if job.get("dependency") or job.get("held"):
        lines.append(
            f"  waits:     dependency {job.get('dependency') or '-'}"
            + (" (cancelled if never met)" if job.get("kill_on_invalid_dep") else "")
            + ("; held" if job.get("held") else "")
        )
    if job.get("array_job_id") is not None:
        limit = f", at most {job['array_limit']} at once" if job.get("array_limit") else ""
        lines.append(f"  array:     {job['array_job_id']}, task {job['array_task_id']}{limit}")
    if job.get("mail_type"):  # scontrol's MailType= MailUser=
        to = (
            "(hidden)"
            if "mail_user" in hidden
            else job.get("mail_user") or "its owner's account at the mail domain"
        )
        lines.append(f"  mail:      {','.join(job['mail_type'])} to {to}")
    print("\n".join(lines), file=out)
    rows = [
        (
            a["attempt"],
            f"{a['node']}/{a['tier']}" if a.get("node") else "-",
            a.get("num_gpus"),
            ago(a.get("dispatched_at"), now),
            ago(a.get("started_at"), now),
            ago(a.get("ended_at"), now),
            state_label(a["outcome"], a.get("reason")),
            a.get("exit_code"),
            "-" if a.get("run_cost_tflop_s") is None else amount(a["run_cost_tflop_s"]),
            a.get("reason") or "-",
        )
        for a in history["data"]
    ]
    if rows:
        headers = ("ATTEMPT", "PLACEMENT", "GPUS", "DISPATCHED", "STARTED", "ENDED", "OUTCOME")
        print("attempts:", file=out)
        text = table((*headers, "EXIT", "RUN (TFLOP-s)", "REASON"), rows)
        print("\n".join("  " + line for line in text.splitlines()), file=out)
    else:
        print("attempts: none yet", file=out)
    spans = [
        (
            f"{r['node']}/{r['tier']}" if r.get("node") else "-",
            ago(r["started_at"], now),
            ago(r.get("ended_at"), now) if r.get("ended_at") else "held",
            r.get("released") or "-",
            duration(r.get("held_s")),
        )
        for r in history["reservations"]
    ]
    if spans:
        print("reservations:", file=out)
        text = table(("PLACEMENT", "STARTED", "ENDED", "RELEASED", "HELD"), spans)
        print("\n".join("  " + line for line in text.splitlines()), file=out)
    return answer


def cancel_many(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    """scancel: the jobs named, or those the filters select (my jobs unless --user), each
    cancelled or refused on its own; exit 1 when any was refused."""
    from jpushare.client.api import ApiError
    from jpushare.client.arguments import UsageError

    filtered = bool(args.state or args.name or args.user)
    if not args.jobs and not filtered:
        raise UsageError("name the jobs to cancel, or select them with --state, --name, --user")
    ids = list(dict.fromkeys(args.jobs))
    if filtered:
        states = [s for s in (args.state or ACTIVE_STATES) if s in ACTIVE_STATES]
        selected = [j["id"] for j in _select(api, args, states)]
        # ids and filters together: the named jobs that the filters also select
        ids = [i for i in ids if i in set(selected)] if ids else selected
    targets: list[JSON] = [{"id": i} for i in ids]
    cancelled: list[JSON] = []
    refused: list[JSON] = []
    for target in targets:
        try:
            job = api.cancel(target["id"])
        except ApiError as exc:
            if exc.code == "UNREACHABLE":
                raise
            refused.append({"id": target["id"], "code": exc.code, "message": exc.message})
            continue
        cancelled.append(job)
    if not args.json:
        for job in cancelled:
            print(
                f"cancelled job {job['id']} ({job['name']}); its lab {job['lab']} was charged "
                f"{amount(job['charged_tflop_s'])} TFLOP-s for it in all"
                + (
                    " so far (provisional: corrected when the run's real end is known)"
                    if job.get("charge_provisional")
                    else ""
                ),
                file=out,
            )
    for r in refused:  # as `cancel JOB` reports a refusal: the API's code and sentence
        print(f"error {clean(r['code'])}: {clean(r['message'])}", file=sys.stderr)
    if not args.json and not targets:
        print("(no job matched: nothing cancelled)", file=out)
    answer: JSON = {"cancelled": cancelled, "refused": refused}
    if refused:
        raise PartlyRefused(answer)
    return answer


class PartlyRefused(Exception):
    """Some jobs were refused: the run prints the answer, then exits 1."""

    def __init__(self, answer: JSON) -> None:
        super().__init__(f"{len(answer['refused'])} refused")
        self.answer = answer


def _select(api: Client, args: argparse.Namespace, states: Sequence[str]) -> Iterator[JSON]:
    if not states:
        return
    before: int | None = None
    while True:
        page = api.jobs(
            states=states,
            mine=args.user is None,
            user=args.user,
            name=args.name,
            before_id=before,
            limit=1000,
        )
        yield from page["data"]
        before = page.get("next_before_id")
        if before is None:
            return


class WaitTimeout(Exception):
    """`wait` ran out of time (exit 124, error TIMEOUT)."""


class Ended(Exception):
    """The jobs waited for ended, and not all completed: the run prints the answer, then
    exits with `code` (`exit_codes.jobs_exit_code`)."""

    def __init__(self, answer: JSON, code: int) -> None:
        super().__init__(f"exit {code}")
        self.answer = answer
        self.code = code


def exit_with_jobs(answer: JSON, jobs: Sequence[JSON]) -> JSON:
    """`answer` when every job completed (or only left the queue), else Ended."""
    code = jobs_exit_code(jobs)
    if code != EXIT_OK:
        raise Ended(answer, code)
    return answer


def wait_for(
    api: Client,
    job_ids: Sequence[int],
    until: str,
    timeout_s: float | None,
    poll_s: float,
) -> list[JSON]:
    """Poll the jobs until each has left the queue (`until="started"`: dispatched,
    running or ended) or ended (`until="ended"`); WaitTimeout after `timeout_s`."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pending = list(dict.fromkeys(job_ids))
    done: dict[int, JSON] = {}
    while True:
        for job_id in list(pending):
            job = api.job(job_id)
            state = job["state"]
            if (until == "started" and state != QUEUED) or state not in ACTIVE_STATES:
                done[job_id] = job
                pending.remove(job_id)
        if not pending:
            return [done[j] for j in dict.fromkeys(job_ids)]
        if deadline is not None and time.monotonic() >= deadline:
            waiting = ", ".join(str(j) for j in pending)
            raise WaitTimeout(
                f"after {duration(timeout_s)} job{'s' if len(pending) > 1 else ''} {waiting} "
                f"had not {'left the queue' if until == 'started' else 'ended'}"
            )
        time.sleep(poll_s)


def wait(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    """Wait until the jobs leave the queue (--started) or end (the default)."""
    until = "started" if args.started else "ended"
    jobs = wait_for(api, args.jobs, until, args.timeout, args.poll)
    if not args.json:
        for job in jobs:
            print(wait_line(job), file=out)
    return exit_with_jobs({"data": jobs}, jobs)


def wait_line(job: JSON) -> str:
    state = state_label(job["state"], job.get("reason"))
    where = f" on {job['node']}/{job.get('tier') or '?'}" if job.get("node") else ""
    tail = f" ({job['reason']})" if job.get("reason") and job["state"] != JobState.COMPLETED else ""
    code = f", exit code {job['exit_code']}" if job.get("exit_code") is not None else ""
    return f"job {shown_id(job)} ({job['name']}): {state}{where}{code}{tail}"


def shown_id(job: JSON) -> str:
    """The id people type: ARRAY_TASK for an array's task (API `display_id`), else the id."""
    return str(job.get("display_id") or job["id"])
