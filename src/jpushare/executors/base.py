"""The executor interface every backend implements (local processes, Slurm, test fakes).

The dispatcher talks to the cluster only through this protocol. Implementations do I/O;
the dataclasses here are plain values. Times are UNIX seconds (float, UTC).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from jpushare.vocabulary import JobId
from jpushare.vocabulary import NodeState as NodeState  # the shared word, named here too

# The job's own JPU-Share variables, set by every executor on top of the job's environment.
JOB_VARIABLES = ("JPUSHARE_JOB_ID", "JPUSHARE_ATTEMPT", "JPUSHARE_JOB_NAME", "JPUSHARE_NODE")


@dataclass(frozen=True, slots=True)
class GpuGroup:
    """GPUs of one model on one node, as the executor sees them: one placement's raw facts.

    `used` counts every GPU a job holds, JPU-Share's or not (SPEC: foreign jobs are busy),
    except LLM backfill's: `backfill` counts those (they yield to research jobs: free for
    the policy, SPEC §1; on Slurm, the backfill partition's jobs Slurm preempts).
    """

    node: str
    gpu_type: str  # the tier name (a Slurm executor maps its GRES types itself)
    total: int
    used: int
    state: NodeState
    partitions: tuple[str, ...] = ()
    backfill: int = 0


class RunState(StrEnum):
    """Where an executor's job stands."""

    PENDING = "PENDING"  # accepted, not started (sbatch accepted, Slurm has not started it)
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"  # exit 0
    FAILED = "FAILED"  # non-zero exit, refused, or lost
    CANCELLED = "CANCELLED"
    OOM = "OOM"  # CUDA or host out of memory: SPEC §5 escalation
    NODE_FAIL = "NODE_FAIL"  # the node died under it: back to the queue, no escalation
    TIMEOUT = "TIMEOUT"

    @property
    def ended(self) -> bool:
        return self not in (RunState.PENDING, RunState.RUNNING)


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """What the dispatcher asks an executor to start.

    `workdir` None marks a job from before revision 0003: it runs in the executor's own
    directory with the service's environment less its JPUSHARE_* settings, its output in
    the executor's log (as it always did). Otherwise the job runs in `workdir` with exactly
    `environment` (plus the account's HOME/USER/LOGNAME/SHELL, CUDA_VISIBLE_DEVICES and the
    JOB_VARIABLES), its output in `output` / `error` (patterns with %j and %a, relative to
    `workdir`; error None: with stdout). `unix_user` is the account it runs as where the
    service may switch accounts (root); CPUs and memory are per GPU, None: no limit.
    """

    job_id: JobId  # JPU-Share's job id; the executor attaches it so a restart can find the job
    attempt: int  # 1, 2, … (OOM retries); with job_id it names the run uniquely
    name: str
    command: str  # run with bash
    node: str
    gpu_type: str
    num_gpus: int
    partition: str | None = None
    user: str | None = None
    time_limit_s: float | None = None
    unix_user: str | None = None
    workdir: str | None = None
    environment: Mapping[str, str] | None = None
    output: str | None = None
    error: str | None = None
    cpus_per_gpu: int | None = None
    mem_per_gpu_mb: int | None = None


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run as the executor sees it now."""

    job_id: JobId
    attempt: int
    executor_id: str  # Slurm job id, or the local run key `<job id>.<attempt>`
    state: RunState
    node: str | None = None
    started_at: float | None = None  # when it really started (run cost is charged from here)
    ended_at: float | None = None
    exit_code: int | None = None
    reason: str | None = None  # a sentence for people (e.g. Slurm's Reason, "CUDA out of memory")


class SubmitRefused(Exception):
    """The backend refused the job (e.g. sbatch error); the message says why, for the user."""


class Executor(Protocol):
    """What the dispatcher needs from a backend. All methods may block briefly (subprocess)."""

    def inventory(self) -> list[GpuGroup]:
        """Every GPU group with total and used GPUs and its node's state."""
        ...

    def submit(self, spec: LaunchSpec) -> str:
        """Start the run pinned to spec.node / spec.gpu_type; return the executor id.

        Idempotent by (job_id, attempt): if that run already exists (a dispatcher crashed
        after submitting), return its id instead of starting a second one.
        Raises SubmitRefused if the backend refuses it.
        """
        ...

    def runs(self) -> list[RunInfo]:
        """Every run this executor started that it still knows about, ended ones included."""
        ...

    def find(self, job_id: JobId, attempt: int) -> RunInfo | None:
        """The run for (job_id, attempt), if the backend has it."""
        ...

    def cancel(self, executor_id: str) -> None:
        """Stop the run (whole process group / scancel). Idempotent."""
        ...

    def log(self, job_id: JobId, attempt: int) -> str:
        """The run's output so far ('' if none): for a job with a `workdir`, its output
        file as its owner can read it."""
        ...


@runtime_checkable
class ResolvesLostRuns(Protocol):
    """An executor that forgets ended runs after a while (Slurm: `MinJobAge`) and can say
    what became of one it no longer lists. The dispatcher asks it about every job it
    recorded as started whose run `runs()` does not show, instead of assuming the node
    failed (a requeue that could run a finished job twice)."""

    def lost_run(self, job_id: JobId, attempt: int, executor_id: str) -> RunInfo:
        """The run's end as the backend's records tell it; FAILED with a reason saying its
        outcome is unknown when they do not. `ended_at` None: it ended before now."""
        ...


@runtime_checkable
class PlansGpus(Protocol):
    """An executor that picks a run's GPU indices itself and can say which it would pick
    (the local executor): the dispatcher names them in the yield request to the router."""

    def planned_gpus(self, spec: LaunchSpec) -> list[int] | None:
        """The indices `submit(spec)` would give now; None when it would refuse."""
        ...
