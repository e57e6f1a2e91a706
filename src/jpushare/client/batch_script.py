"""Batch scripts as sbatch reads them: the `#SBATCH` (and `#JPU`) directives, and the
command that runs the script as its own batch script on the job's node.

sbatch's rules: directives are read from the lines after the interpreter line up to the
first command (a line that is neither blank nor a comment); those after it are ignored,
as comments. Each directive line holds options as on the command line
(`#SBATCH --time=1:00:00`, `#SBATCH -J train`); text after ` #` is a comment. Options
given on the command line win over the script's. A directive JPU-Share does not know, or
knows and does not support, is a warning naming it; one it cannot honour at all (more than
one node, several tasks) is an error saying why. Arrays (`--array`), dependencies
(`--dependency`) and holds (`--hold`) are options like the others.

The script travels with the job: `script_command` writes it, as it was at submission (as
sbatch copies it), into a private temporary file on the node and runs it there, so its
own interpreter line (`#!/bin/bash`, `#!/usr/bin/env python3`) runs it. Pure: text in,
words and sentences out.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, field

DIRECTIVE_PREFIXES = ("#SBATCH", "#JPU")

# sbatch options JPU-Share cannot honour: the job would not be the one the script asks for.
REFUSED: dict[str, str] = {
    "--nodes": "a job runs on one node here (1-8 GPUs of one placement)",
    "-N": "a job runs on one node here (1-8 GPUs of one placement)",
    "--ntasks": "one task per job here (start several processes from the script)",
    "-n": "one task per job here (start several processes from the script)",
}
# Values of REFUSED options that ask for nothing more than a job already is.
_HARMLESS = {"--nodes": {"1", "1-1"}, "-N": {"1", "1-1"}, "--ntasks": {"1"}, "-n": {"1"}}

# sbatch options read and ignored, with what a user should know about each.
IGNORED: dict[str, str] = {
    "--account": "the lab is your account's (fair share is per lab)",
    "-A": "the lab is your account's (fair share is per lab)",
    "--qos": "there is one queue, in fair-share order",
    "-q": "there is one queue, in fair-share order",
    "--mem": "memory is asked per GPU here: --mem-per-gpu",
    "--cpus-per-task": "CPUs are asked per GPU here: --cpus-per-gpu",
    "-c": "CPUs are asked per GPU here: --cpus-per-gpu",
    "--exclusive": "a job has its GPUs to itself; the node is shared",
    "--ntasks-per-node": "one task per job here",
    "--constraint": "use --min-tier (or --gres gpu:TIER:N)",
    "-C": "use --min-tier (or --gres gpu:TIER:N)",
}


class BatchScriptError(ValueError):
    """The script cannot be submitted as it is; the message names the line and why."""


@dataclass(frozen=True)
class Directives:
    """The script's options, in order (`words`), and a sentence per directive left out."""

    words: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def read_directives(script: str, known_options: set[str], source: str = "script") -> Directives:
    """The options of the script's directives that `known_options` (the submit parser's
    option strings) holds, as command-line words; a warning for each other one."""
    lines = script.splitlines()
    if not lines or not lines[0].startswith("#!"):
        raise BatchScriptError(
            f"{source}: this does not look like a batch script: the first line must start "
            "with #! and an interpreter (e.g. #!/bin/bash), as sbatch requires"
        )
    words: list[str] = []
    warnings: list[str] = []
    for number, line in enumerate(lines[1:], start=2):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break  # the first command: every later directive is a comment (sbatch)
        prefix = next((p for p in DIRECTIVE_PREFIXES if stripped.startswith(p)), None)
        if prefix is None or stripped[len(prefix) : len(prefix) + 1] not in (" ", "\t"):
            continue
        where = f"{source}:{number}"
        try:
            tokens = shlex.split(stripped[len(prefix) :], comments=True)
        except ValueError as exc:
            raise BatchScriptError(f"{where}: {prefix} {exc}") from None
        for option, value in _options(tokens, where):
            name = option.split("=", 1)[0]
            given = option.split("=", 1)[1] if "=" in option else value
            if name in REFUSED and given not in _HARMLESS.get(name, set()):
                raise BatchScriptError(f"{where}: {prefix} {name}: {REFUSED[name]}")
            if name in REFUSED:
                continue
            if name not in known_options:
                why = IGNORED.get(name, "JPU-Share has no such option")
                warnings.append(f"{where}: {prefix} {name} ignored: {why}")
                continue
            words.append(option)
            if value is not None:
                words.append(value)
    return Directives(words, warnings)


def _options(tokens: list[str], where: str) -> list[tuple[str, str | None]]:
    """A directive's tokens as (option, its separate value or None)."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("-"):
            raise BatchScriptError(f"{where}: {token!r} is not an option")
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        if "=" not in token and following is not None and not following.startswith("-"):
            out.append((token, following))
            i += 2
        else:
            out.append((token, None))
            i += 1
    return out


def script_command(script: str, args: list[str]) -> str:
    """A shell command that runs `script` (its text, as submitted) with `args` as its own
    batch script: written to a private temporary file on the node, run by its interpreter
    line, removed after; the job's exit code is the script's."""
    text = script if script.endswith("\n") else script + "\n"
    tag = "JPUSHARE_SCRIPT_" + hashlib.sha256(text.encode()).hexdigest()[:16]
    run = "".join(" " + shlex.quote(a) for a in args)
    return (
        'jpushare_script=$(mktemp "${TMPDIR:-/tmp}/jpushare-script.XXXXXX") || exit 1\n'
        f"cat > \"$jpushare_script\" <<'{tag}'\n{text}{tag}\n"
        'chmod 700 "$jpushare_script"\n'
        f'"$jpushare_script"{run}\n'
        'jpushare_rc=$?; rm -f "$jpushare_script"; exit $jpushare_rc\n'
    )
