"""`jpushare submit`: a job from a command (`-- CMD…`), sbatch's `--wrap CMD`, or a batch
script (`SCRIPT [ARGS…]`, its `#SBATCH`/`#JPU` directives read as sbatch does: see
`batch_script`), with sbatch's spellings of its options (`-J`, `-G`, `--gres`,
`--gpus-per-node`, `-p`, `--time`: see `sbatch_options`).

Options given on the command line win over the script's directives: a directive sets an
option only where the command line left it at its default.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from jpushare.client import arguments, job_commands
from jpushare.client.arguments import UsageError
from jpushare.client.batch_script import BatchScriptError, read_directives, script_command
from jpushare.client.exit_codes import EXIT_CODES_HELP
from jpushare.client.formatting import state_label
from jpushare.client.sbatch_options import GpuRequestError, gpu_request, partition_min_tier
from jpushare.mail_types import MailType, check_mail_address, parse_mail_types
from jpushare.run_settings import ENV_NAME

if TYPE_CHECKING:
    from jpushare.client.api import JSON, Client

SUBMIT_EPILOG = (
    """\
forms (as sbatch):
  jpushare submit [OPTIONS] -- CMD…          a command (one argument: a shell command as is)
  jpushare submit [OPTIONS] --wrap 'CMD'     the same, as sbatch --wrap
  jpushare submit [OPTIONS] SCRIPT [ARGS…]   a batch script: its #SBATCH / #JPU lines are
                                             options (the command line wins); it runs with
                                             its own #! interpreter, as submitted

with --wait, """
    + EXIT_CODES_HELP
)

_MAX_SCRIPT_BYTES = 100_000  # the API takes a command of up to 128 KiB; the wrapper is small


def add_submit_options(p: argparse.ArgumentParser) -> None:
    """The options of `submit`, also read from a script's directives."""
    p.add_argument(
        "--gpus",
        "-G",
        type=arguments.typed_gpus,
        metavar="[TYPE:]N",
        help="1-8 GPUs on one node; TYPE: a tier, the weakest it may run on",
    )
    p.add_argument(
        "--gres", type=arguments.gres, metavar="gpu[:TYPE]:N", help="as sbatch --gres (GPUs only)"
    )
    p.add_argument(
        "--gpus-per-node",
        type=arguments.typed_gpus,
        metavar="[TYPE:]N",
        help="the same as --gpus (a job has one node)",
    )
    p.add_argument("--min-tier", metavar="T", help="the weakest GPU tier it may run on")
    p.add_argument(
        "--partition",
        "-p",
        metavar="P[,P…]",
        help="where the partitions' tiers are one tier and every stronger one: that --min-tier",
    )
    p.add_argument(
        "--name",
        "--job-name",
        "-J",
        metavar="NAME",
        dest="name",
        help="default: the script's name, or the command's program (python3)",
    )
    p.add_argument(
        "--time-limit",
        "--time",
        "-t",
        type=arguments.time_limit,
        metavar="TIME",
        dest="time_limit",
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
    p.add_argument("--cpus-per-gpu", type=arguments.cpus, metavar="N", help="default: the tier's")
    p.add_argument(
        "--mem-per-gpu", type=arguments.mem, metavar="SIZE", help="e.g. 16G (default: the tier's)"
    )
    p.add_argument(
        "--mail-type",
        metavar="TYPE[,TYPE…]",
        help="mail me when it starts (BEGIN), ends (END), fails (FAIL), is requeued (REQUEUE); "
        "ALL, NONE",
    )
    p.add_argument("--mail-user", type=mail_address, metavar="ADDR", help="default: the site's")
    p.add_argument("--wrap", metavar="CMD", help="the job's command, as sbatch --wrap")
    # Eligibility, as sbatch's (docs/slurm-users.md, "Arrays, dependencies and holds").
    p.add_argument("--array", "-a", metavar="0-15|1,3,5-9:2[%K]",
                   help="one job per task, ID_TASK; %%K: at most K at once")  # fmt: skip
    p.add_argument("--dependency", "-d", metavar="afterok:JOB[:JOB…][,…]|singleton",
                   help="start only after: after, afterok, afternotok, afterany; ',' all, "
                   "'?' any")  # fmt: skip
    p.add_argument("--kill-on-invalid-dep", choices=("yes", "no"), metavar="yes|no",
                   help="cancel it if its dependency can never be met (default no)")  # fmt: skip
    p.add_argument("--hold", "-H", action="store_true", help="queue it held: `release` it")
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
    p.add_argument(
        "cmd", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS…] | -- CMD…", help="what it runs"
    )


class _DirectiveParser(argparse.ArgumentParser):
    """The submit options as a script's directives: an error is the script's, not exit 2
    with the command line's usage."""

    def error(self, message: str) -> NoReturn:
        raise BatchScriptError(message)


def _directive_parser() -> argparse.ArgumentParser:
    parser = _DirectiveParser(prog="#SBATCH", add_help=False, argument_default=argparse.SUPPRESS)
    add_submit_options(parser)
    return parser


def _defaults() -> dict[str, Any]:
    parser = argparse.ArgumentParser(add_help=False)
    add_submit_options(parser)
    return vars(parser.parse_args([]))


def apply_directives(args: argparse.Namespace, script: str, source: str) -> list[str]:
    """Set on `args` the options the script's directives give and the command line left at
    their defaults; the warnings for the directives left out."""
    parser = _directive_parser()
    known = set(parser._option_string_actions)
    directives = read_directives(script, known, source)
    try:
        given = vars(parser.parse_args(directives.words))
    except BatchScriptError as exc:
        raise BatchScriptError(f"{source}: a directive: {exc}") from None
    defaults = _defaults()
    for name, value in given.items():
        if name != "cmd" and getattr(args, name) == defaults.get(name):
            setattr(args, name, value)
    return directives.warnings


def is_script(word: str) -> bool:
    """`submit SCRIPT …` (a path: it has a slash or names a file here) rather than the old
    `submit python t.py` (a command without `--`)."""
    return "/" in word or os.path.isfile(word)


def _command(args: argparse.Namespace) -> tuple[str, str | None]:
    """The job's command and its default name (None: the API's, the program's name)."""
    words = list(args.cmd)
    if args.wrap is not None:
        if words:
            raise UsageError("--wrap is the whole command: give no script or -- CMD with it")
        return args.wrap, None
    if words and words[0] == "--":
        words = words[1:]
    elif words and is_script(words[0]):
        path = words[0]
        try:
            with open(path, "rb") as f:
                raw = f.read(_MAX_SCRIPT_BYTES + 1)
        except OSError as exc:
            raise UsageError(f"cannot read the batch script {path}: {exc.strerror}") from None
        if len(raw) > _MAX_SCRIPT_BYTES:
            raise UsageError(f"{path} is longer than {_MAX_SCRIPT_BYTES} bytes")
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            raise UsageError(f"{path} is not a text file (UTF-8)") from None
        source = os.path.basename(path)
        for warning in apply_directives(args, text, source):
            print(f"warning: {warning}", file=sys.stderr)
        return script_command(text, words[1:]), source
    if not words:
        raise UsageError(
            "submit needs a command: a script (jpushare submit train.sh), --wrap 'CMD' "
            "or -- CMD, e.g. jpushare submit --gpus 1 -- nvidia-smi"
        )
    return (words[0] if len(words) == 1 else shlex.join(words)), None


def _gpus_and_tier(api: Client, args: argparse.Namespace) -> tuple[int, str | None]:
    asks = {"--gpus": args.gpus, "--gres": args.gres, "--gpus-per-node": args.gpus_per_node}
    num_gpus, tier = gpu_request(asks, args.min_tier)
    if args.partition:
        from_partition = partition_min_tier(args.partition, api.tiers()["data"])
        if tier and tier != from_partition:
            raise GpuRequestError(
                f"--partition {args.partition} means --min-tier {from_partition}, not {tier}"
            )
        tier = from_partition
    return num_gpus, tier


def submit(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    try:
        command, script_name = _command(args)
        num_gpus, min_tier = _gpus_and_tier(api, args)
    except (BatchScriptError, GpuRequestError) as exc:
        raise UsageError(str(exc)) from None
    mail_type = _mail_types(args.mail_type)
    job = api.submit(
        args.name or script_name or "",
        command,
        num_gpus,
        min_tier=min_tier,
        time_limit_s=args.time_limit,
        workdir=os.path.abspath(args.chdir or os.getcwd()),
        environment=export_environment(args.export, os.environ),
        output_path=args.output,
        error_path=args.error,
        cpus_per_gpu=args.cpus_per_gpu,
        mem_per_gpu_mb=args.mem_per_gpu,
        mail_type=mail_type,
        mail_user=args.mail_user,
        eligibility={
            "hold": args.hold,
            "dependency": args.dependency,
            "kill_on_invalid_dep": args.kill_on_invalid_dep == "yes",
            "array": args.array,
        },
    )
    tasks: list[int] = job.get("array_task_ids") or [job["id"]]
    if not args.json:
        tier = f", tier >= {job['min_tier']}" if job.get("min_tier") else ""
        what = f"job {job['id']}"
        if job.get("array_task_ids"):
            what = f"array job {job['id']} ({len(tasks)} tasks: {job['id']}_TASK"
            what += f", at most {job['array_limit']} at once)" if job.get("array_limit") else ")"
        state = state_label(job["state"])
        if job.get("waiting"):
            state += f" ({job['waiting']})"
        print(
            f"submitted {what} ({job['name']}): {job['num_gpus']} GPU"
            f"{'s' if job['num_gpus'] != 1 else ''}{tier}, {state}; "
            f"`jpushare why {job.get('display_id') or job['id']}` says what it waits for",
            file=out,
            flush=True,
        )
    if args.wait or args.wait_started:  # --wait as sbatch's: until it ends, with its code
        until = "ended" if args.wait else "started"
        done = job_commands.wait_for(api, tasks, until, args.timeout, args.poll)
        if not args.json:
            for each in done:
                print(job_commands.wait_line(each), file=out)
        return job_commands.exit_with_jobs(done[0] if len(done) == 1 else {"data": done}, done)
    return job


def mail_address(value: str) -> str:
    """--mail-user's argparse type: one address."""
    try:
        return check_mail_address(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _mail_types(text: str | None) -> list[str] | None:
    """--mail-type as the API's list; sbatch's types JPU-Share does not send: a warning."""
    if text is None:
        return None
    try:
        types, skipped = parse_mail_types(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for word in skipped:
        print(f"warning: --mail-type {word} ignored: JPU-Share does not send it", file=sys.stderr)
    return [t.value for t in MailType if t in types] or ["NONE"]


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
