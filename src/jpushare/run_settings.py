"""Where and with what a job runs (sbatch's --chdir, --export, --output, --error,
--cpus-per-gpu, --mem-per-gpu): the checks and bounds every submission passes.

Pure: no I/O, and nothing heavy imported (the CLI checks variable names with it). Whether
the directory exists and its owner may enter it is checked at dispatch, as the owner (a job
that cannot start there ends FAILED with the reason).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_PATH_BYTES = 4096  # PATH_MAX
MAX_ENV_VARIABLES = 4096
MAX_ENV_VALUE_BYTES = 131_071  # one execve string (MAX_ARG_STRLEN, with its NUL)
MAX_ENV_BYTES = 512 * 1024  # every NAME=value together
MIN_CPUS_PER_GPU, MAX_CPUS_PER_GPU = 1, 256
MIN_MEM_PER_GPU_MB, MAX_MEM_PER_GPU_MB = 64, 4 << 20  # 64 MiB to 4 TiB


@dataclass(frozen=True, slots=True)
class JobRun:
    """How a job runs. `workdir` None: a job from before revision 0003 (or a client that
    sends none): the executor's directory and the service's environment, as before."""

    workdir: str | None = None
    environment: Mapping[str, str] | None = None
    output_path: str | None = None  # %j job id, %a attempt; relative to workdir
    error_path: str | None = None  # None: stderr with stdout
    cpus_per_gpu: int | None = None  # None: the tier's default
    mem_per_gpu_mb: int | None = None


def check_workdir(value: str) -> str:
    """An absolute path without NUL, at most PATH_MAX bytes."""
    _check_path("the working directory", value)
    if not value.startswith("/"):
        raise ValueError(f"the working directory must be an absolute path, not {value!r}")
    return value


def check_file_pattern(value: str) -> str:
    """An output or error file: a path (relative to the working directory, or absolute)."""
    _check_path("an output file", value)
    if value.endswith("/"):
        raise ValueError(f"an output file must name a file, not a directory: {value!r}")
    return value


def check_environment(env: Mapping[str, str]) -> Mapping[str, str]:
    """Names as a shell takes them, no NUL, bounded in count and size."""
    if len(env) > MAX_ENV_VARIABLES:
        raise ValueError(f"at most {MAX_ENV_VARIABLES} environment variables, not {len(env)}")
    total = 0
    for name, value in env.items():
        if not ENV_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
        if "\x00" in value:
            raise ValueError(f"variable {name} holds a NUL character")
        size = len(value.encode("utf-8"))
        if size + len(name) + 1 > MAX_ENV_VALUE_BYTES:
            raise ValueError(f"variable {name} is over {MAX_ENV_VALUE_BYTES} bytes")
        total += size + len(name) + 2
    if total > MAX_ENV_BYTES:
        raise ValueError(f"the environment is {total} bytes, over {MAX_ENV_BYTES}")
    return env


def check_cpus_per_gpu(value: int) -> int:
    if not MIN_CPUS_PER_GPU <= value <= MAX_CPUS_PER_GPU:
        raise ValueError(f"cpus_per_gpu must be {MIN_CPUS_PER_GPU}-{MAX_CPUS_PER_GPU}, not {value}")
    return value


def check_mem_per_gpu_mb(value: int) -> int:
    if not MIN_MEM_PER_GPU_MB <= value <= MAX_MEM_PER_GPU_MB:
        raise ValueError(
            f"mem_per_gpu_mb must be {MIN_MEM_PER_GPU_MB}-{MAX_MEM_PER_GPU_MB} (MiB), not {value}"
        )
    return value


def checked(run: JobRun) -> JobRun:
    """`run` if every field passes; ValueError saying which does not."""
    if run.workdir is not None:
        check_workdir(run.workdir)
    elif run.environment is not None or run.output_path or run.error_path:
        raise ValueError("an environment or output files need a working directory")
    if run.environment is not None:
        check_environment(run.environment)
    for pattern in (run.output_path, run.error_path):
        if pattern is not None:
            check_file_pattern(pattern)
    if run.cpus_per_gpu is not None:
        check_cpus_per_gpu(run.cpus_per_gpu)
    if run.mem_per_gpu_mb is not None:
        check_mem_per_gpu_mb(run.mem_per_gpu_mb)
    return run


def _check_path(what: str, value: str) -> None:
    if not value:
        raise ValueError(f"{what} must not be empty")
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL characters")
    if len(value.encode("utf-8")) > MAX_PATH_BYTES:
        raise ValueError(f"{what} is over {MAX_PATH_BYTES} bytes")
