"""The name a job gets when it is submitted without one (`store.submit`).

A job's name is public (`squeue` shows it): the default takes only the program's name,
never its arguments nor the `VAR=value` assignments before it (`HF_TOKEN=… python x`).
"""

from __future__ import annotations

import re
import shlex

DEFAULT_NAME_CHARS = 64
FALLBACK_NAME = "job"
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)
_SHELL_STOP = re.compile(r"[;&|()<>`$\s]")  # where a shell word stops being a program name
_REDIRECTION = re.compile(r"\d*[<>].*", re.DOTALL)
# Programs that run the next word: the name is that word's (`env A=1 python x` -> python).
_WRAPPERS = frozenset({"env", "exec", "nohup", "command"})
_WRAPPER_OPTIONS_WITH_VALUE = frozenset({"-u", "--unset", "-C", "--chdir"})


def default_job_name(command: str) -> str:
    """The name of a job submitted without one: its program's basename (`python3`,
    `train.sh`), at most DEFAULT_NAME_CHARS printable characters; "job" if there is none."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:  # unbalanced quotes: the shell would refuse it too
        words = command.split()
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if _ASSIGNMENT.fullmatch(word) or _REDIRECTION.fullmatch(word):
            continue
        program = _SHELL_STOP.split(word.lstrip("({!"), maxsplit=1)[0].rsplit("/", 1)[-1]
        if program in _WRAPPERS:
            while i < len(words) and words[i].startswith("-"):
                i += 2 if words[i] in _WRAPPER_OPTIONS_WITH_VALUE else 1
            continue
        name = "".join(c for c in program if c.isprintable())[:DEFAULT_NAME_CHARS]
        return name or FALLBACK_NAME
    return FALLBACK_NAME
