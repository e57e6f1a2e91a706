"""The CLI's exit codes, and the one `wait` / `submit --wait` exits with for ended jobs.

As `sbatch --wait`, a wait exits with the job's own exit code, so that
`jpushare submit --wait … && next-step` stops after a failure. A job that ended without an
exit code of its own (cancelled, stopped at its time limit, out of memory, lost with its
node) and a wait that ran out of time each get a code of their own, in 120-124 (below the
shell's 126-165, which mean "not run" and "killed by a signal"). With several jobs, the
highest code wins. Pure: a function of the jobs' JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from jpushare.time_limits import ended_by_time_limit
from jpushare.vocabulary import JobState

EXIT_OK = 0
EXIT_ERROR = 1  # the API refused or could not be reached
EXIT_USAGE = 2  # bad arguments
EXIT_CANCELLED = 120  # a job was cancelled (by its user, an admin, or an invalid dependency)
EXIT_TIME_LIMIT = 121  # a job was stopped at its time limit
EXIT_OUT_OF_MEMORY = 122  # a job ran out of memory (on its strongest tier)
EXIT_NO_EXIT_CODE = 123  # a job failed without an exit code (node lost, dispatch failed, …)
EXIT_WAIT_TIMEOUT = 124  # `--timeout` passed first (as GNU timeout's 124)

EXIT_CODES_HELP = f"""\
exit codes (as sbatch --wait; with several jobs, the highest):
  {EXIT_OK}      every job completed
  1-255  the job's own exit code
  {EXIT_CANCELLED}    a job was cancelled
  {EXIT_TIME_LIMIT}    a job reached its time limit
  {EXIT_OUT_OF_MEMORY}    a job ran out of memory
  {EXIT_NO_EXIT_CODE}    a job failed without an exit code (e.g. its node was lost)
  {EXIT_WAIT_TIMEOUT}    --timeout passed first
  {EXIT_ERROR}, {EXIT_USAGE}   the API refused or was unreachable; bad usage (before any wait)"""

_MEMORY_WORDS = ("out of memory", "oom")


def job_exit_code(job: Mapping[str, Any]) -> int:
    """The code a wait exits with for one job that has ended (0 for one still active:
    `wait --started` stops there)."""
    state = job.get("state")
    code = job.get("exit_code")
    reason = str(job.get("reason") or "")
    if state == JobState.CANCELLED:
        return EXIT_CANCELLED
    if ended_by_time_limit(str(state), reason):  # Slurm's TIMEOUT, whatever code it left
        return EXIT_TIME_LIMIT
    if state == JobState.FAILED and any(w in reason.lower() for w in _MEMORY_WORDS):
        return EXIT_OUT_OF_MEMORY
    if isinstance(code, int) and not isinstance(code, bool) and code != 0:
        return code if 0 < code < 256 else EXIT_NO_EXIT_CODE
    return EXIT_NO_EXIT_CODE if state == JobState.FAILED else EXIT_OK


def jobs_exit_code(jobs: Iterable[Mapping[str, Any]]) -> int:
    """The highest of the jobs' codes (0 for none)."""
    return max((job_exit_code(j) for j in jobs), default=EXIT_OK)
