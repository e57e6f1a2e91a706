"""The users' commands of `jpushare`, talking to the REST API with `Client`.

    jpushare submit --gpus N [--min-tier T] [--name NAME] [--time-limit TIME]
                    [--chdir DIR] [--export ALL|NONE|VAR[,VAR=value…]]
                    [--output PATH] [--error PATH] [--cpus-per-gpu N] [--mem-per-gpu SIZE]
                    [-J NAME] [-G [TYPE:]N | --gres gpu[:TYPE]:N] [-p P] [--wrap CMD]
                    (-- CMD… | SCRIPT [ARGS…])     (see submit_command; docs/slurm-users.md)
    jpushare jobs [--state S]... [--lab L] [--mine] [--user U] [--name NAME]
                  [--since WHEN] [--until WHEN] [--format table|csv] [--limit N]
    jpushare show JOB
    jpushare queue [--limit N] [--start] [--me | -u U]
    jpushare squeue [--me | -u U]
    jpushare why JOB
    jpushare wait JOB… [--started] [--timeout S]
    jpushare cancel [JOB…] [--state S]... [--name NAME] [--user U]
    jpushare log JOB [--attempt N] [--stderr] [--follow] [--raw]
    jpushare labs | placements | tiers
    jpushare stats [--since 7d]

Every command takes `--url URL`, `--token-file PATH` (`-`: stdin; see
`jpushare.client.config` for JPUSHARE_URL, JPUSHARE_TOKEN and the config file; a token
given as an argument is refused, as every user of the host can read argv) and `--json`
(the API's JSON on stdout, for scripts). Without a token, on a host with MUNGE (every
host of a Slurm cluster), each request carries a fresh MUNGE credential instead: the
service knows you by your Unix account; a configured token wins over MUNGE. Output is a
table or a sentence a person can read; times are relative ("3m ago"). `submit -- CMD…`:
one argument is taken as a shell command as is (`-- 'python a.py && echo done'`), several
are quoted and joined (`-- python a.py --lr 0.1`). Like sbatch, `submit` sends the
current directory (`--chdir`) and environment (`--export`, default ALL; the client's own
JPUSHARE_* settings, e.g. the token, are left out unless named): the job runs there, with
them, as you.

Every string the API answers (names, users, labs, commands, reasons, why sentences, error
messages) is printed through `formatting.clean`: no control character or escape sequence
another user put there reaches the terminal, and a newline or tab in it prints as a space
(`--json` prints the answer exactly). `log` prints the job's output as it is when the job
is the caller's own (as `cat` would); another user's (a pi's or an admin's view) goes
through `formatting.clean_output` (its lines kept) unless `--raw`.

Exit codes: 0 done; 1 the API refused or could not be reached (one line on stderr:
`error CODE: message`); 2 bad usage. `wait` and `submit --wait` exit as `sbatch --wait`,
with the job's exit code, and with codes of their own for a job that ended without one
and for a timeout (`jpushare.client.exit_codes`, printed by their --help).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from jpushare.client import (
    arguments,
    cluster_views,
    hold_commands,
    job_commands,
    job_refs,
    log_command,
    squeue_view,
    submit_command,
)
from jpushare.client.arguments import UsageError
from jpushare.client.config import ClientConfigError, config_path, load_client_config
from jpushare.client.exit_codes import (
    EXIT_CODES_HELP,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_WAIT_TIMEOUT,
)
from jpushare.client.formatting import (
    ago,
    amount,
    clean,
    json_text,
    parse_time,
    table,
)
from jpushare.client.token_args import add_token_options, read_token_file
from jpushare.client.web import register_web

# --- formatting (shared helpers live in jpushare.client.formatting) --------------------------


def _reservation(res: JSON | None) -> str:
    if not res:
        return "-"
    return f"{res['gpus']}/{res['of']} {res['node']}/{res['tier']}"


def _next_cycle(actions: Sequence[JSON] | None) -> str:
    """What the next cycle would do for a job (a projection): 'reserve 1 node-c/rtx5090'."""
    words = []
    for a in actions or ():
        where = f"{a['node']}/{a['tier']}"
        if a["action"] == "absorb":
            words.append(f"absorb +{a['gpus']} ({a['reserved_after']}) {where}")
        elif a["action"] == "release":
            words.append(f"release ({a['reason']})")
        else:
            words.append(f"{a['action']} {a['gpus']} {where}")
    return ", ".join(words) or "-"


# --- commands --------------------------------------------------------------------------------

if TYPE_CHECKING:  # httpx is imported only when a command talks to the API (start-up time)
    from jpushare.client.api import JSON, Client
    from jpushare.munge import Munge

    Printer = Callable[[Client, argparse.Namespace, TextIO, datetime], JSON | str]


def _jobs(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    limit = args.limit if args.limit is not None else (None if args.format == "csv" else 50)
    if args.jobs:  # -j: these jobs (an array's ID: every task), as sacct -j
        jobs = [api.job(i) for i in dict.fromkeys(args.jobs)]
    else:
        jobs = list(job_commands.all_jobs(api, args, limit))
    if args.json:
        return {"data": jobs, "count": len(jobs)}
    if args.format == "csv":
        job_commands.jobs_csv(jobs, out, now)
    else:
        job_commands.jobs_table(jobs, out, now)
    return {"data": jobs, "count": len(jobs)}


def _queue(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    result = squeue_view.selected_queue(api, args, args.limit)
    if not args.json:
        rows = [
            (
                e["rank"],
                e.get("display_id") or e["job_id"],
                e["name"],
                e["user"],
                e["lab"],
                amount(e["lab_usage_tflop_s"]),
                e["num_gpus"],
                e.get("min_tier"),
                _reservation(e.get("reservation")),
                _next_cycle(e.get("next_cycle")),
                e["code"],
                ago(e["queue_entered_at"], now),
            )
            for e in result["data"]
        ]
        headers: tuple[str, ...] = ("RANK", "JOB", "NAME", "USER", "LAB", "LAB-USAGE", "GPUS")
        headers += ("MIN-TIER", "RESERVED", "NEXT CYCLE", "WHY", "WAITING")
        shown: list[tuple[object, ...]] = list(rows)
        if args.start:
            shown = [
                (*row, _start(e.get("estimated_start"), now), e.get("estimate_basis") or "-")
                for row, e in zip(rows, result["data"], strict=True)
            ]
            headers += ("START", "BASIS")
        print(table(headers, shown), file=out)
        length = result["queue_length"]
        if "selected" in result:
            print(f"({len(rows)} of {result['selected']} selected; {length} queued)", file=out)
        elif length > len(rows):
            print(f"({len(rows)} of {length} queued jobs shown)", file=out)
        elif not rows:
            print("(the queue is empty)", file=out)
    return result


def _start(value: str | None, now: datetime) -> str:
    """An estimated start: `2026-05-04 13:20 UTC (in 1h20m)`; N/A beyond the forecast."""
    at = parse_time(value)
    if at is None:
        return "N/A"
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M} UTC ({ago(value, now)})"


def _why(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    why = api.why(args.job)
    if not args.json:
        head = f"job {why['job_id']}: {why['code']}"
        if why.get("rank"):
            head += f" (rank {why['rank']} of {why['queue_length']})"
        print(head, file=out)
        print(f"  {why['sentence']}", file=out)
        if why.get("estimate_sentence"):
            print(f"  {why['estimate_sentence']}", file=out)
        places = why.get("placements") or []
        if places:
            print("fit placements:", file=out)
            rows = [
                (
                    p["node"],
                    p["tier"],
                    p["capacity"],
                    p["busy"],
                    p["reserved"],
                    p["idle"],
                    "yes" if p["schedulable"] else "no",
                    cluster_views.held_by(p.get("reservations")),
                )
                for p in places
            ]
            headers = ("NODE", "TIER", "CAPACITY", "BUSY", "RESERVED", "IDLE", "UP")
            text = table((*headers, "RESERVED FOR"), rows)
            print("\n".join("  " + line for line in text.splitlines()), file=out)
        if why.get("notes") and why.get("rank"):
            print("earlier:", file=out)
            for note in why["notes"]:
                print(f"  - {note}", file=out)
    return why


# --- plumbing --------------------------------------------------------------------------------


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("connection and output")
    group.add_argument("--url", help="the API (default: $JPUSHARE_URL, the config file, localhost)")
    add_token_options(group)
    group.add_argument("--json", action="store_true", help="print the API's JSON")
    return common


def default_munge() -> Munge | None:
    """This host's munged, if any (`jpushare.munge`: ctypes and subprocess, imported only
    when a command runs without a token)."""
    from jpushare.munge import default_munge as find_munge

    return find_munge()


def now() -> datetime:
    """This host's clock, for relative times and elapsed time (tests replace it)."""
    return datetime.now(UTC)


def run(args: argparse.Namespace, printer: Printer, out: TextIO | None = None) -> int:
    """Run one command: config, client, call, errors as one line on stderr."""
    from jpushare.client.api import ApiError, Client  # httpx: only once a request is made

    out = out if out is not None else sys.stdout
    try:
        token = read_token_file(args.token_file) if args.token_file else None
        config = load_client_config(args.url, token)
        munge = None if config.token else default_munge()
        if not config.token and munge is None:
            raise ApiError(
                "UNAUTHENTICATED",
                "no token and no MUNGE on this host: set JPUSHARE_TOKEN, use --token-file "
                f"PATH, or put it in {config_path(os.environ)} (ask an admin for one)",
            )
        with Client(config.url, config.token, munge=munge, printable=not args.json) as api:
            job_refs.resolve_args(api, args)  # ID / ID_TASK -> job ids
            result = printer(api, args, out, now())
    except ApiError as exc:
        print(f"error {clean(exc.code)}: {clean(exc.message)}", file=sys.stderr)
        for alt in exc.details.get("alternatives", []) if exc.code == "NO_FIT_PLACEMENT" else []:
            print(
                clean(
                    f"  try: --gpus {alt['num_gpus']} --min-tier {alt['min_tier']} "
                    f"({alt['placements']} placements fit)"
                ),
                file=sys.stderr,
            )
        return EXIT_ERROR
    except ClientConfigError as exc:
        print(f"error CONFIG: {clean(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except UsageError as exc:
        print(f"error USAGE: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # e.g. `jpushare log 4 | head`
        return EXIT_OK
    except job_commands.PartlyRefused as exc:
        if args.json:
            out.write(json_text(exc.answer) + "\n")
        return EXIT_ERROR
    except job_commands.WaitTimeout as exc:
        print(f"error TIMEOUT: {exc}", file=sys.stderr)
        return EXIT_WAIT_TIMEOUT
    except job_commands.Ended as exc:
        if args.json:
            out.write(json_text(exc.answer) + "\n")
        return exc.code
    if args.json:
        out.write(json_text(result) + "\n")
    return EXIT_OK


_STATE_HELP = "repeatable; QUEUED, RUNNING, … or Slurm's PENDING/PD, R, CD, F, CA"
_WINDOW_HELP = "window {}: a duration back from now (12h, 7d, 2w) or an ISO date/time"


def _wait_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--timeout", type=arguments.positive, metavar="S", help="give up after S seconds"
    )
    p.add_argument("--poll", type=arguments.positive, default=1.0, help=argparse.SUPPRESS)


def register(subparsers: Any) -> None:
    """Add the users' commands: submit, jobs, queue, why, cancel, log, labs, placements, tiers,
    stats."""
    common = _common()

    def add(
        name: str, printer: Printer, help_text: str, epilog: str | None = None
    ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = subparsers.add_parser(
            name,
            parents=[common],
            help=help_text,
            description=help_text,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(func=lambda args: run(args, printer))
        return p

    p = add(
        "submit",
        submit_command.submit,
        "queue a job: jpushare submit --gpus N [--min-tier T] -- CMD…",
        submit_command.SUBMIT_EPILOG,
    )
    submit_command.add_submit_options(p)
    _wait_options(p)

    p = add("jobs", _jobs, "list jobs, newest first (as sacct: --since, --until, --format csv)")
    p.add_argument("--state", "-s", type=arguments.state, action="append", metavar="S",
                   help=_STATE_HELP)  # fmt: skip
    p.add_argument("--lab", metavar="L")
    p.add_argument("--jobs", "-j", type=arguments.job_refs, action="extend", metavar="ID[,ID…]",
                   help="only these (ID: an array's every task; ID_TASK), as sacct -j")  # fmt: skip
    p.add_argument("--mine", "--me", action="store_true", help="only my jobs")
    p.add_argument("--user", "-u", metavar="U", help="only this user's jobs")
    p.add_argument("--name", "-n", metavar="NAME", help="only jobs of this name")
    p.add_argument("--since", "-S", metavar="WHEN", help=_WINDOW_HELP.format("start"))
    p.add_argument("--until", "-E", metavar="WHEN", help=_WINDOW_HELP.format("end (excluded)"))
    p.add_argument(
        "--format",
        choices=("table", "csv"),
        default="table",
        help="csv: one row per job, the columns of `jpushare.client.job_commands.CSV_COLUMNS`",
    )
    p.add_argument(
        "--limit", type=int, metavar="N", help="at most N jobs (default 50; csv: every job)"
    )

    p = add("show", job_commands.show, "a job in full: command, times, attempts, costs")
    p.add_argument("job", type=arguments.job_ref, metavar="JOB", help="the job: ID or ID_TASK")

    p = add("cancel", job_commands.cancel_many, "cancel jobs: by id, or by --state/--name/--user")
    p.add_argument("jobs", type=arguments.job_ref, nargs="*", metavar="JOB",
                   help="job ids: ID (an array: every task) or ID_TASK")  # fmt: skip
    hold_commands.register(add, arguments.job_ref, arguments.time_limit)
    p.add_argument("--state", "-t", type=arguments.state, action="append", metavar="S",
                   help=_STATE_HELP)  # fmt: skip
    p.add_argument("--name", "-n", metavar="NAME", help="jobs of this name")
    p.add_argument("--user", "-u", metavar="U", help="this user's jobs (default: mine)")

    p = add(
        "wait",
        job_commands.wait,
        "wait until jobs end (or, with --started, leave the queue)",
        EXIT_CODES_HELP,
    )
    p.add_argument("jobs", type=arguments.job_ref, nargs="+", metavar="JOB",
                   help="job ids: ID (an array: every task) or ID_TASK")  # fmt: skip
    p.add_argument("--started", action="store_true", help="until each has left the queue")
    _wait_options(p)

    p = add("queue", _queue, "the queue in fair-share order, with each job's why")
    p.add_argument("--limit", type=int, default=100, metavar="N", help="default 100")
    p.add_argument(
        "--start",
        action="store_true",
        help="add each job's estimated start (a projection, like squeue --start) and its basis",
    )
    p.add_argument("jobs", nargs="*", type=arguments.job_ref, metavar="ID",
                   help="only these (ID: an array's every task; ID_TASK): squeue -j")  # fmt: skip
    squeue_view.add_user_selection(p)
    p = add("squeue", squeue_view.squeue, "running and queued jobs, as squeue shows them")
    p.add_argument("--jobs", "-j", type=arguments.job_refs, action="extend", metavar="ID[,ID…]",
                   help="only these (ID: an array's every task; ID_TASK)")  # fmt: skip
    squeue_view.add_user_selection(p)

    for name, printer, text in (
        ("why", _why, "why a job is not running (or what happened to it)"),
        ("log", log_command.log, "a job's output"),
    ):
        p = add(name, printer, text)
        p.add_argument("job", type=arguments.job_ref, metavar="JOB", help="the job: ID or ID_TASK")
        if name == "log":
            p.add_argument("--attempt", type=int, metavar="N", help="default: the last")
            p.add_argument("--stderr", action="store_true", help="its error file (--error)")
            p.add_argument(
                "--follow",
                "-f",
                action="store_true",
                help="until the job ends (a queued job: from when it starts)",
            )
            p.add_argument(
                "--raw",
                action="store_true",
                help="another user's output as it is, control characters and all "
                "(your own always is)",
            )
            p.add_argument("--poll", type=arguments.positive, default=1.0, help=argparse.SUPPRESS)

    add("labs", cluster_views.labs, "labs and their usage, least first (the fair-share order)")
    add("placements", cluster_views.placements, "GPUs per node and tier: busy, reserved, idle")
    add("tiers", cluster_views.tiers, "GPU tiers, strongest first")
    p = add(
        "stats", cluster_views.stats, "the watch-list: failed reservations, hold, multi-GPU burden"
    )
    p.add_argument(
        "--since",
        metavar="WHEN",
        help="window start: a duration back from now (30m, 12h, 7d, 2w) or an ISO time; default 7d",
    )
    register_web(subparsers)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m jpushare.client.cli …`: these commands alone (tests, scripts)."""
    parser = argparse.ArgumentParser(prog="jpushare", description=__doc__.split("\n\n")[0])
    register(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
