"""The users' commands of `jpushare`, talking to the REST API with `Client`.

    jpushare submit --gpus N [--min-tier T] [--name NAME] [--time-limit TIME]
                    [--chdir DIR] [--export ALL|NONE|VAR[,VAR=value…]]
                    [--output PATH] [--error PATH] [--cpus-per-gpu N] [--mem-per-gpu SIZE]
                    -- CMD…
    jpushare jobs [--state S]... [--lab L] [--mine] [--user U] [--name NAME]
                  [--since WHEN] [--until WHEN] [--format table|csv] [--limit N]
    jpushare show JOB
    jpushare queue [--limit N] [--start]
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
import math
import os
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from jpushare.client import job_commands
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
    clean_output,
    duration,
    json_text,
    parse_time,
    state_label,
    table,
)
from jpushare.client.token_args import add_token_options, read_token_file
from jpushare.client.web import register_web
from jpushare.memory_sizes import format_mem_mb, parse_mem_mb
from jpushare.run_settings import ENV_NAME, MAX_MEM_PER_GPU_MB, MIN_MEM_PER_GPU_MB
from jpushare.time_limits import TimeLimitError, parse_time_limit
from jpushare.vocabulary import ACTIVE_STATES, JobState

JOB_STATES = tuple(JobState)
_STATE_ALIASES = {"QUEUED": JobState.GLOBAL_QUEUE_WAIT, "WAITING": JobState.GLOBAL_QUEUE_WAIT}


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


def _held_by(reservations: Sequence[JSON] | None) -> str:
    return ", ".join(f"job {r['job_id']}: {r['gpus']}/{r['of']}" for r in reservations or ()) or "-"


# --- commands --------------------------------------------------------------------------------

if TYPE_CHECKING:  # httpx is imported only when a command talks to the API (start-up time)
    from jpushare.client.api import JSON, Client
    from jpushare.munge import Munge

    Printer = Callable[[Client, argparse.Namespace, TextIO, datetime], JSON | str]


def _submit(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    words = list(args.cmd)
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        raise UsageError(
            "submit needs a command after --, e.g. jpushare submit --gpus 1 -- nvidia-smi"
        )
    command = words[0] if len(words) == 1 else shlex.join(words)
    job = api.submit(
        args.name or "",
        command,
        args.gpus,
        min_tier=args.min_tier,
        time_limit_s=args.time_limit,
        workdir=os.path.abspath(args.chdir or os.getcwd()),
        environment=export_environment(args.export, os.environ),
        output_path=args.output,
        error_path=args.error,
        cpus_per_gpu=args.cpus_per_gpu,
        mem_per_gpu_mb=args.mem_per_gpu,
    )
    if not args.json:
        tier = f", tier >= {job['min_tier']}" if job.get("min_tier") else ""
        print(
            f"submitted job {job['id']} ({job['name']}): {job['num_gpus']} GPU"
            f"{'s' if job['num_gpus'] != 1 else ''}{tier}, {state_label(job['state'])}; "
            f"`jpushare why {job['id']}` says what it waits for",
            file=out,
            flush=True,
        )
    if args.wait or args.wait_started:  # --wait as sbatch's: until it ends, with its code
        until = "ended" if args.wait else "started"
        (job,) = job_commands.wait_for(api, [job["id"]], until, args.timeout, args.poll)
        if not args.json:
            print(job_commands.wait_line(job), file=out)
        return job_commands.exit_with_jobs(job, [job])
    return job


def _jobs(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    limit = args.limit if args.limit is not None else (None if args.format == "csv" else 50)
    jobs = list(job_commands.all_jobs(api, args, limit))
    if args.json:
        return {"data": jobs, "count": len(jobs)}
    if args.format == "csv":
        job_commands.jobs_csv(jobs, out, now)
    else:
        job_commands.jobs_table(jobs, out, now)
    return {"data": jobs, "count": len(jobs)}


def _queue(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    result = api.queue(limit=args.limit)
    if not args.json:
        rows = [
            (
                e["rank"],
                e["job_id"],
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
        if length > len(rows):
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
                    _held_by(p.get("reservations")),
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


def export_environment(spec: str, env: Mapping[str, str]) -> dict[str, str]:
    """sbatch's --export: `ALL` (every variable), `NONE`, or `[ALL,]VAR[,VAR=value…]`.

    ALL leaves out the client's own JPUSHARE_* settings (the token must not reach the
    job's record, which the lab's PI can read) and names no shell takes (exported bash
    functions); a variable named in the list is sent whatever its name."""
    items = [item.strip() for item in spec.split(",") if item.strip()]
    if not items:
        raise UsageError("--export needs ALL, NONE or variable names")
    out: dict[str, str] = {}
    if items[0].upper() == "NONE" and len(items) == 1:
        return out
    if items[0].upper() == "ALL":
        out = {
            k: v
            for k, v in env.items()
            if ENV_NAME.fullmatch(k) and not k.startswith("JPUSHARE_") and "\x00" not in v
        }
        items = items[1:]
    for item in items:
        name, eq, value = item.partition("=")
        if not ENV_NAME.fullmatch(name):
            raise UsageError(f"--export: {name!r} is not a variable name")
        if eq:
            out[name] = value
        elif name in env:
            out[name] = env[name]
    return out


_LIVE = ACTIVE_STATES


def _log(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
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


def _labs(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    result = api.labs()
    if not args.json:
        rows = [
            (
                lab.get("rank"),
                lab["name"],
                amount(lab["usage_tflop_s"]),
                _share(lab.get("share")),
                amount(lab.get("in_flight_tflop_s", 0.0)),
                lab["running_jobs"],
                lab.get("running_gpus"),
                lab.get("reserved_gpus"),
                lab["queued_jobs"],
            )
            for lab in result["data"]
        ]
        headers = ("RANK", "LAB", "USAGE (TFLOP-s)", "SHARE", "IN FLIGHT", "RUNNING", "GPUS")
        print(table((*headers, "RESERVED", "QUEUED"), rows), file=out)
        print(
            "(rank 1 is served first; IN FLIGHT: held by running jobs and reservations, "
            "charged when each job ends)",
            file=out,
        )
    return result


def _placements(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    result = api.placements()
    if not args.json:
        rows = []
        for p in result["data"]:
            state = p["node_state"] + (" drained" if p["drained"] else "")
            rows.append(
                (
                    p["node"],
                    p["tier"],
                    p["capacity"],
                    p["busy"],
                    p["reserved"],
                    p["idle"],
                    state,
                    _held_by(p["reservations"]),
                )
            )
        headers = ("NODE", "TIER", "CAPACITY", "BUSY", "RESERVED", "IDLE", "STATE")
        print(table((*headers, "RESERVED FOR"), rows), file=out)
    return result


def _tiers(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    result = api.tiers()
    if not args.json:
        rows = [
            (
                t["name"],
                t["tflops"],
                t["sort_order"],
                t["max_gpus"],
                "yes" if t["auto_assign"] else "no",
                t.get("partition"),
            )
            for t in result["data"]
        ]
        print(table(("TIER", "TFLOPS", "ORDER", "MAX-GPUS", "AUTO", "PARTITION"), rows), file=out)
    return result


def _share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _stats(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    w = api.watch(args.since)
    if not args.json:
        r = w["reservations"]
        rel = r["released"]
        h = w["hold_s"]
        u = w["usage"]
        print(f"watch-list (SPEC §10) since {w['since']} ({ago(w['since'], now)})", file=out)
        print(
            f"reservations: {r['started']} started, {r['failed']} failed"
            f" ({_share(r['failed_rate'])}: r3 {rel['r3']}, r5 {rel['r5']},"
            f" cancel {rel['cancel']}); filled {rel['filled']}, swap {rel['swap']},"
            f" still held {r['held']}",
            file=out,
        )
        print(
            f"hold: mean {duration(h['mean'])}, p95 {duration(h['p95'])},"
            f" max {duration(h['max'])} ({h['count']} released)",
            file=out,
        )
        print(
            f"reservation cost: {_share(u['reservation_share'])} of"
            f" {amount(u['charged_tflop_s'])} TFLOP-s charged for {u['ended_jobs']} ended jobs",
            file=out,
        )
        labs = [
            (lab, c["started"], c["failed"], _share(c["failed_rate"]))
            for lab, c in w["reservations_by_lab"].items()
        ]
        if labs:
            print("\nfailed reservations per lab:", file=out)
            print(table(("LAB", "STARTED", "FAILED", "RATE"), labs), file=out)
        sizes = [
            (
                int(g),
                c["jobs"],
                "-" if c["burden"] is None else f"{c['burden']:.3f}",
                duration(c["mean_wait_s"]),
                amount(c["run_tflop_s"]),
                amount(c["reservation_tflop_s"]),
            )
            for g, c in w["by_gpus"].items()
        ]
        if sizes:
            print("\nended jobs by size (burden = charged / run TFLOP-s; 1.000 = none):", file=out)
            headers = ("GPUS", "JOBS", "BURDEN", "MEAN-WAIT", "RUN (TFLOP-s)", "RESERVED")
            print(table(headers, sizes), file=out)
    return w


# --- plumbing --------------------------------------------------------------------------------


class UsageError(Exception):
    """Bad arguments that argparse could not catch (exit 2)."""


def _job_id(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a job id: {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a job id: {raw!r}")
    return value


def _gpus(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of GPUs: {raw!r}") from None


def _state(raw: str) -> str:
    value = _STATE_ALIASES.get(raw.upper(), raw.upper())
    if value not in JOB_STATES:
        raise argparse.ArgumentTypeError(
            f"unknown state {raw!r} (one of: {', '.join(JOB_STATES)}, or QUEUED)"
        )
    return value


def _positive(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number (NaN): give seconds, e.g. 30")
    if math.isinf(value):
        raise argparse.ArgumentTypeError(f"{raw!r} is infinite: give seconds, e.g. 3600")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {raw!r}")
    return value


def _time_limit(raw: str) -> float:
    """--time-limit as sbatch's --time: `90` (minutes), `1:30:00`, `2-00:00:00`, `1h30m`."""
    try:
        return parse_time_limit(raw)
    except TimeLimitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cpus(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a CPU count: {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1 CPU per GPU, not {value}")
    return value


def _mem(raw: str) -> int:
    """--mem-per-gpu, checked here so that the bound reads in sbatch's units (4T, not MiB)."""
    try:
        value = parse_mem_mb(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value > MAX_MEM_PER_GPU_MB:
        raise argparse.ArgumentTypeError(
            f"{raw!r} is too much: at most {format_mem_mb(MAX_MEM_PER_GPU_MB)} per GPU"
        )
    if value < MIN_MEM_PER_GPU_MB:
        raise argparse.ArgumentTypeError(
            f"{raw!r} is too little: at least {format_mem_mb(MIN_MEM_PER_GPU_MB)} per GPU"
        )
    return value


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


_WINDOW_HELP = "window {}: a duration back from now (12h, 7d, 2w) or an ISO date/time"


def _wait_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=_positive, metavar="S", help="give up after S seconds")
    p.add_argument("--poll", type=_positive, default=1.0, help=argparse.SUPPRESS)


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
        _submit,
        "queue a job: jpushare submit --gpus N [--min-tier T] -- CMD…",
        "with --wait, " + EXIT_CODES_HELP,
    )
    p.add_argument("--gpus", type=_gpus, required=True, metavar="N", help="1-8 GPUs on one node")
    p.add_argument("--min-tier", metavar="T", help="the weakest GPU tier it may run on")
    p.add_argument(
        "--name", metavar="NAME", help="default: the command's program name (e.g. python3)"
    )
    p.add_argument(
        "--time-limit",
        "-t",
        type=_time_limit,
        metavar="TIME",
        help="runtime limit, as sbatch --time: 90 (minutes), 1:30:00, 2-00:00:00, 1h30m",
    )
    p.add_argument("--chdir", "-D", metavar="DIR", help="where it runs (default: here)")
    p.add_argument(
        "--export",
        default="ALL",
        metavar="ALL|NONE|VAR[,VAR=value…]",
        help="its environment, as sbatch's --export (default ALL: this one)",
    )
    p.add_argument(
        "--output",
        "-o",
        metavar="PATH",
        help="stdout file: %%j job, %%a attempt (default jpushare-%%j.out in its directory)",
    )
    p.add_argument("--error", "-e", metavar="PATH", help="stderr file (default: with stdout)")
    p.add_argument("--cpus-per-gpu", type=_cpus, metavar="N", help="default: the tier's")
    p.add_argument(
        "--mem-per-gpu", type=_mem, metavar="SIZE", help="e.g. 16G (default: the tier's)"
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="return when it ends, with its exit code (as sbatch --wait; see below)",
    )
    p.add_argument(
        "--wait-started",
        action="store_true",
        help="return once it has left the queue (dispatched, running or ended)",
    )
    _wait_options(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD…", help="the command")

    p = add("jobs", _jobs, "list jobs, newest first (as sacct: --since, --until, --format csv)")
    p.add_argument("--state", type=_state, action="append", metavar="S", help="repeatable")
    p.add_argument("--lab", metavar="L")
    p.add_argument("--mine", action="store_true", help="only my jobs")
    p.add_argument("--user", metavar="U", help="only this user's jobs")
    p.add_argument("--name", metavar="NAME", help="only jobs of this name")
    p.add_argument("--since", metavar="WHEN", help=_WINDOW_HELP.format("start"))
    p.add_argument("--until", metavar="WHEN", help=_WINDOW_HELP.format("end (excluded)"))
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
    p.add_argument("job", type=_job_id, metavar="JOB", help="the job id")

    p = add("cancel", job_commands.cancel_many, "cancel jobs: by id, or by --state/--name/--user")
    p.add_argument("jobs", type=_job_id, nargs="*", metavar="JOB", help="job ids")
    p.add_argument("--state", type=_state, action="append", metavar="S", help="repeatable")
    p.add_argument("--name", metavar="NAME", help="jobs of this name")
    p.add_argument("--user", metavar="U", help="this user's jobs (default: mine)")

    p = add(
        "wait",
        job_commands.wait,
        "wait until jobs end (or, with --started, leave the queue)",
        EXIT_CODES_HELP,
    )
    p.add_argument("jobs", type=_job_id, nargs="+", metavar="JOB", help="job ids")
    p.add_argument("--started", action="store_true", help="until each has left the queue")
    _wait_options(p)

    p = add("queue", _queue, "the queue in fair-share order, with each job's why")
    p.add_argument("--limit", type=int, default=100, metavar="N", help="default 100")
    p.add_argument(
        "--start",
        action="store_true",
        help="add each job's estimated start (a projection, like squeue --start) and its basis",
    )

    for name, printer, text in (
        ("why", _why, "why a job is not running (or what happened to it)"),
        ("log", _log, "a job's output"),
    ):
        p = add(name, printer, text)
        p.add_argument("job", type=_job_id, metavar="JOB", help="the job id")
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
            p.add_argument("--poll", type=_positive, default=1.0, help=argparse.SUPPRESS)

    add("labs", _labs, "labs and their usage, least first (the fair-share order)")
    add("placements", _placements, "GPUs per node and tier: busy, reserved, idle")
    add("tiers", _tiers, "GPU tiers, strongest first")
    p = add("stats", _stats, "the watch-list: failed reservations, hold, multi-GPU burden")
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
