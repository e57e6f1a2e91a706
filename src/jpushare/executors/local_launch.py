"""What the local executor's wrapper (`local_run.py`) is told about a run: who, where, with
what — the launch record, written into the run's record before the process exists.

A job runs as its owner's account where the service may switch accounts (else as the
service's), in its working directory with exactly the environment it was submitted with
(never the service's) plus the account's HOME, USER, LOGNAME, SHELL and the JPUSHARE_* /
CUDA variables of its GPUs; its stdout/stderr go to its own files (patterns expanded,
relative to its directory). CPUs (`cpus_per_gpu` x GPUs), memory (`mem_per_gpu_mb` x GPUs:
a memory cgroup where there is one, else RLIMIT_DATA) and the output size bound it. A job
from before revision 0003 runs as it always did (`workdir` None: the executor's directory,
the service's environment less its JPUSHARE_* settings, its output in the state directory),
except that under a root service it runs as its owner with only PATH and the account's
variables.

The GPUs: JPUSHARE_GPUS holds the machine's indices, CUDA_VISIBLE_DEVICES (with
CUDA_DEVICE_ORDER=PCI_BUS_ID) the same indices, or 0…N-1 where the devices cgroup leaves
the job only its own GPUs (CUDA then sees no other, as under Slurm's ConstrainDevices);
plus JPUSHARE_JOB_ID, JPUSHARE_ATTEMPT, JPUSHARE_JOB_NAME and JPUSHARE_NODE. Its GPU with
index N is taken to be the device node `/dev/nvidiaN` (the driver's minor numbers, normally
in PCI order as the indices are).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jpushare.executors.base import JOB_VARIABLES, LaunchSpec
from jpushare.executors.local_records import RunRecord, account_dict
from jpushare.executors.output_files import file_size, output_paths
from jpushare.unix_accounts import UnixAccount

_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"  # a job submitted without PATH (--export=NONE)


@dataclass(frozen=True, slots=True)
class LaunchSetting:
    """What of the executor a launch depends on."""

    bash: str
    base_env: Mapping[str, str]  # the service's environment (jobs from before 0003)
    service_account: UnixAccount
    device_control: bool  # a devices cgroup leaves the job only its own GPUs
    memory_cgroup: bool  # a memory cgroup holds all the job's memory together
    output_max_bytes: int | None
    old_log: Path  # the output of a job from before revision 0003


def fill_launch(
    rec: RunRecord,
    spec: LaunchSpec,
    setting: LaunchSetting,
    account: UnixAccount | None,
    pick_cpus: Callable[[int], list[int]],
) -> None:
    """Fill `rec.launch` (and the CPUs and output offsets it holds) for `spec`, run as
    `account` (None: the service's own)."""
    runs_as = account or setting.service_account
    # Where the devices cgroup hides the other GPUs, CUDA and NVML number the ones left
    # from 0, as under Slurm's ConstrainDevices: CUDA_VISIBLE_DEVICES counts from 0 too,
    # and JPUSHARE_GPUS keeps the machine's indices.
    visible = range(len(rec.gpu_indices)) if setting.device_control else rec.gpu_indices
    job_vars = {
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in visible),
        "JPUSHARE_GPUS": ",".join(str(i) for i in rec.gpu_indices),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "JPUSHARE_JOB_ID": rec.job_id,
        "JPUSHARE_ATTEMPT": str(rec.attempt),
        "JPUSHARE_JOB_NAME": rec.name,
        "JPUSHARE_NODE": rec.node,
    }
    assert set(JOB_VARIABLES) <= set(job_vars)
    launch: dict[str, Any] = {
        "command": rec.command,
        "bash": setting.bash,
        "account": None if account is None else account_dict(account),
    }
    if spec.workdir is None:  # before revision 0003: as it always ran
        if account is None:
            env = {k: v for k, v in setting.base_env.items() if not k.startswith("JPUSHARE_")}
        else:
            env = {"PATH": _DEFAULT_PATH, **account.login_env()}
        launch |= {
            "workdir": None,  # the wrapper starts in the executor's directory
            "output": str(setting.old_log),
            "error": None,
            "output_by_service": True,
        }
    else:
        env = dict(spec.environment or {})
        env.setdefault("PATH", _DEFAULT_PATH)
        env |= runs_as.login_env()
        files = output_paths(spec.workdir, spec.output, spec.error, rec.job_id, rec.attempt)
        launch |= {
            "workdir": spec.workdir,
            "output": files.output,
            "error": files.error,
            "output_by_service": False,
        }
        # Where this attempt's output begins (earlier attempts' output stays above it).
        rec.output_offset = file_size(files.output)
        rec.error_offset = 0 if files.error is None else file_size(files.error)
    launch["env"] = env | job_vars
    if spec.cpus_per_gpu is not None:
        rec.cpus = pick_cpus(spec.cpus_per_gpu * spec.num_gpus)
        launch["cpus"] = rec.cpus
    if spec.mem_per_gpu_mb is not None:
        launch["mem_bytes"] = spec.mem_per_gpu_mb * spec.num_gpus << 20
        # RLIMIT_DATA only where no memory cgroup holds the job (it is per process and
        # misses shared memory).
        launch["rlimit_data"] = None if setting.memory_cgroup else launch["mem_bytes"]
    launch["fsize_bytes"] = setting.output_max_bytes
    rec.launch = launch


def least_loaded_cpus(held: Iterable[Iterable[int]], count: int) -> list[int]:
    """`count` CPUs this process may use, the ones fewest unended runs hold (`held`: each
    run's CPUs) first, so runs share CPUs only when there are not enough free ones."""
    usable = sorted(os.sched_getaffinity(0))
    load = dict.fromkeys(usable, 0)
    for cpus in held:
        for cpu in cpus:
            if cpu in load:
                load[cpu] += 1
    return sorted(sorted(usable, key=lambda c: (load[c], c))[:count])
