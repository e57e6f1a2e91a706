"""A job's bodies: what a client submits or changes, the job it reads back, its attempts
and its log; `job_public` turns a store record into `JobPublic`."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from jpushare import run_settings as job_run
from jpushare.api.schemas.common import (
    MAX_TIME_LIMIT_S,
    MIN_TIME_LIMIT_S,
    GpuCount,
    Name,
    StrictIn,
    TimeLimitS,
    no_nul,
)
from jpushare.ledger.eligibility import parse_dependency
from jpushare.ledger.job_arrays import parse_array
from jpushare.mail_types import MailType, check_mail_address, parse_mail_types
from jpushare.store.records import JobRecord
from jpushare.store.submissions import Eligibility
from jpushare.time_limits import TIME_LIMIT_FORMS, parse_time_limit, state_label
from jpushare.vocabulary import JobState, Waiting

# Linux caps one argument (the command goes to `bash -c` as one) at 128 KiB with its NUL.
MAX_COMMAND_BYTES = 131_071


def _fits_one_argument(value: str) -> str:
    if len(value.encode("utf-8")) > MAX_COMMAND_BYTES:
        raise ValueError(
            f"the command is longer than {MAX_COMMAND_BYTES} bytes in UTF-8; put it in a script"
        )
    return value


def _time_limit(value: str) -> str:
    seconds = parse_time_limit(value)  # TimeLimitError (a ValueError) names the accepted forms
    if not MIN_TIME_LIMIT_S <= seconds <= MAX_TIME_LIMIT_S:
        raise ValueError(f"a time limit is 1 s to 365 days, not {value!r} ({seconds:g} s)")
    return value


class JobBase(BaseModel):
    """What a job is asked to be: the fields a client sends and gets back, defined once
    (`JobCreate` adds what only a request has, `JobPublic` what only the service knows)."""

    num_gpus: GpuCount
    time_limit_s: float | None = Field(default=None, description="seconds")
    workdir: Annotated[str, AfterValidator(job_run.check_workdir)] | None = Field(
        default=None,
        description="absolute directory it runs in (sbatch --chdir); null only on jobs from "
        "before revision 0003, which ran in the service's directory",
    )
    output_path: Annotated[str, AfterValidator(job_run.check_file_pattern)] | None = Field(
        default=None, description="stdout file, %j job id, %a attempt (default jpushare-%j.out)"
    )
    error_path: Annotated[str, AfterValidator(job_run.check_file_pattern)] | None = Field(
        default=None, description="stderr file (default: with stdout)"
    )
    cpus_per_gpu: (
        Annotated[int, Field(ge=job_run.MIN_CPUS_PER_GPU, le=job_run.MAX_CPUS_PER_GPU)] | None
    ) = Field(default=None, description="asked for; default: its tier's")
    mem_per_gpu_mb: (
        Annotated[int, Field(ge=job_run.MIN_MEM_PER_GPU_MB, le=job_run.MAX_MEM_PER_GPU_MB)] | None
    ) = Field(default=None, description="MiB; default: its tier's")
    environment: Annotated[dict[str, str], AfterValidator(job_run.check_environment)] | None = (
        Field(
            default=None,
            description="its environment exactly (sbatch --export); needs workdir. Shown only "
            "in GET /v1/jobs/{id}",
        )
    )


DEPENDENCY_FORMS = (
    "after|afterok|afternotok|afterany:JOB[:JOB…], joined by ',' (all) or '?' (any), or "
    "singleton; JOB is an id or ARRAY_TASK"
)


def _dependency(value: str) -> str:
    parse_dependency(value)  # ValueError -> 422 with its sentence
    return value


def _array(value: str) -> str:
    parse_array(value)
    return value


class JobCreate(JobBase, StrictIn):
    """A job to queue (SPEC §2). `num_gpus` 1-8 for every role; `min_tier` by name."""

    name: Annotated[str, Field(max_length=200), AfterValidator(no_nul)] = Field(
        default="",
        description="default: the command's program name (its basename, without the "
        "arguments or the VAR=value assignments before it: `python3`, `train.sh`)",
    )
    # Required here: a job without one would run in the service's own directory.
    workdir: Annotated[str, AfterValidator(job_run.check_workdir)] = Field(
        description="absolute directory it runs in (sbatch --chdir), as its owner; the CLI "
        "sends the directory it is run from",
    )
    command: Annotated[
        str,
        Field(min_length=1, max_length=100_000),
        AfterValidator(no_nul),
        AfterValidator(_fits_one_argument),
    ]
    min_tier: Name | None = Field(default=None, description="the weakest GPU tier it may use")
    # Bounded where a person sends it; a job the store holds may have any positive limit.
    time_limit_s: TimeLimitS | None = None
    time_limit: Annotated[str, Field(max_length=40), AfterValidator(_time_limit)] | None = Field(
        default=None,
        description=f"the time limit as sbatch --time writes it, instead of time_limit_s: "
        f"{TIME_LIMIT_FORMS}",
    )

    mail_type: (
        Annotated[
            list[Literal["NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "ARRAY_TASKS"]],
            Field(max_length=7),
        ]
        | None
    ) = Field(
        default=None,
        description="sbatch --mail-type: mail its owner when it starts (BEGIN), ends (END), "
        "fails (FAIL) or is requeued (REQUEUE); ALL is the four, NONE (the default) none; "
        "ARRAY_TASKS: an array's tasks mail one by one (else the array mails as a whole)",
    )
    mail_user: Annotated[str, AfterValidator(check_mail_address)] | None = Field(
        default=None,
        description="sbatch --mail-user: the address; default its owner's Unix account at "
        "the operator's JPUSHARE_MAIL_DOMAIN",
    )

    def mail_types(self) -> frozenset[MailType]:
        """The mail types asked for (none by default)."""
        return parse_mail_types(",".join(self.mail_type or ["NONE"]))[0]

    # Eligibility (sbatch's --hold, --dependency, --kill-on-invalid-dep, --array).
    hold: bool = Field(default=False, description="queue it held: it waits for a release")
    dependency: Annotated[str, Field(max_length=10_000), AfterValidator(_dependency)] | None = (
        Field(default=None, description=f"as sbatch --dependency: {DEPENDENCY_FORMS}")
    )
    kill_on_invalid_dep: bool = Field(
        default=False, description="cancel it when its dependency can never be met"
    )
    array: Annotated[str, Field(max_length=1000), AfterValidator(_array)] | None = Field(
        default=None,
        description="as sbatch --array: 0-15, 1,3,5-9:2, 0-99%4 (at most 4 at once); one "
        "job per task, ids ARRAY_TASK",
    )

    @model_validator(mode="after")
    def _one_time_limit(self) -> JobCreate:
        if self.time_limit is not None and self.time_limit_s is not None:
            raise ValueError("give time_limit or time_limit_s, not both")
        return self

    def eligibility(self) -> Eligibility:
        """Its hold, dependency and array, for the store."""
        tasks, limit = parse_array(self.array) if self.array is not None else (None, None)
        return Eligibility(
            hold=self.hold,
            dependency=self.dependency,
            kill_on_invalid_dep=self.kill_on_invalid_dep,
            array_tasks=tasks,
            array_limit=limit,
        )

    def limit_s(self) -> float | None:
        """The time limit in seconds, from whichever of the two fields was given."""
        if self.time_limit is not None:
            return parse_time_limit(self.time_limit)
        return self.time_limit_s

    def run(self) -> job_run.JobRun:
        """How it asks to run, for the store."""
        return job_run.JobRun(
            workdir=self.workdir,
            environment=self.environment,
            output_path=self.output_path,
            error_path=self.error_path,
            cpus_per_gpu=self.cpus_per_gpu,
            mem_per_gpu_mb=self.mem_per_gpu_mb,
        )


class ReservationPublic(BaseModel):
    """A queued job's reservation: `gpus` of its `of` GPUs on one placement (SPEC §3 R1)."""

    node: str
    tier: str
    gpus: int
    of: int
    since: datetime | None


HIDDEN_DESCRIPTION = (
    "the private fields withheld from you (null here): a job's command, working directory, "
    "environment and output files are shown to its owner, its lab's PIs and admins only"
)


class JobPublic(JobBase):
    """A job. Private fields (`command`, and the working directory, environment and output
    files) are null for users other than its owner, its lab's PIs and admins, and named in
    `hidden`; the rest is what `squeue` shows everyone."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    id: int
    name: str
    command: str | None = Field(description="null when hidden (see `hidden`)")
    hidden: list[str] = Field(default_factory=list, description=HIDDEN_DESCRIPTION)
    user: str
    lab: str
    min_tier: str | None = Field(description="the weakest tier it may run on now")
    minimum_tier_sort_order: int
    state: JobState
    state_label: str = Field(
        default="",
        description='the state as people read it: "FAILED (time limit)" for a job its time '
        "limit ended, else the state",
    )
    submitted_at: datetime
    queue_entered_at: datetime
    dispatched_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    node: str | None
    tier: str | None
    attempts: int
    exit_code: int | None
    reason: str | None
    run_cost_tflop_s: float
    reservation_cost_tflop_s: float
    charged_tflop_s: float = Field(description="how much of its bill has reached its lab")
    charge_provisional: bool = Field(
        default=False,
        description="in a cancel's answer: the run was charged up to the cancel, and the "
        "charge is corrected once the executor reports when the run really ended",
    )
    reservation: ReservationPublic | None
    display_id: str = Field(
        default="", description="the id people type: ARRAY_TASK for an array's task, else id"
    )
    waiting: Waiting | None = Field(
        default=None,
        description="queued but not in the policy's queue, and why: HELD, DEPENDENCY, "
        "ARRAY_LIMIT or DEPENDENCY_NEVER_SATISFIED (null: in the queue, or not queued)",
    )
    held: bool = False
    dependency: str | None = Field(
        default=None, description="its --dependency, each id the job it names (an array: its tasks)"
    )
    kill_on_invalid_dep: bool = False
    array_job_id: int | None = Field(default=None, description="its array: the first task's id")
    array_task_id: int | None = None
    array_limit: int | None = Field(default=None, description="--array …%K: at most K at once")
    array_task_ids: list[int] | None = Field(
        default=None, description="in a submit's answer for an array: every task's job id"
    )
    mail_type: list[str] | None = Field(
        default=None,
        description="its --mail-type ([] for none) in GET /v1/jobs/{id} and a submit's "
        "answer; null in lists",
    )
    mail_user: str | None = Field(
        default=None,
        description="its --mail-user (null: its owner's account at the operator's mail "
        "domain); private: null when hidden",
    )


class JobUpdate(StrictIn):
    """What `PATCH /v1/jobs/{id}` may change while the job is queued (scontrol update)."""

    name: Annotated[str, Field(min_length=1, max_length=200), AfterValidator(no_nul)] | None = None
    time_limit_s: TimeLimitS | None = None
    time_limit: Annotated[str, Field(max_length=40), AfterValidator(_time_limit)] | None = Field(
        default=None, description=f"instead of time_limit_s: {TIME_LIMIT_FORMS}"
    )

    @model_validator(mode="after")
    def _something(self) -> JobUpdate:
        if self.time_limit is not None and self.time_limit_s is not None:
            raise ValueError("give time_limit or time_limit_s, not both")
        if self.name is None and self.time_limit is None and self.time_limit_s is None:
            raise ValueError("give name, time_limit or time_limit_s")
        return self

    def limit_s(self) -> float | None:
        """The new time limit in seconds, or None (unchanged)."""
        if self.time_limit is not None:
            return parse_time_limit(self.time_limit)
        return self.time_limit_s


class JobsPublic(BaseModel):
    data: list[JobPublic]
    count: int
    next_before_id: int | None = Field(description="pass as before_id for the next page")


class AttemptPublic(BaseModel):
    """One try at running a job: where, when, how it ended (from its `job_events`)."""

    attempt: int
    node: str | None
    tier: str | None
    num_gpus: int | None
    dispatched_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    outcome: str = Field(
        description="COMPLETED, FAILED, CANCELLED, OOM_REQUEUED, NODE_FAIL_REQUEUED, "
        "or DISPATCHED / RUNNING while it lasts"
    )
    exit_code: int | None
    reason: str | None
    run_cost_tflop_s: float | None = Field(description="null while it runs")


class ReservationSpanPublic(BaseModel):
    """One reservation the job held while queued (SPEC §3)."""

    node: str | None
    tier: str | None
    started_at: datetime
    ended_at: datetime | None
    released: str | None = Field(description="filled | swap | r3 | r5 | cancel; null: held")
    held_s: float | None


class AttemptsPublic(BaseModel):
    job_id: int
    data: list[AttemptPublic]
    reservations: list[ReservationSpanPublic]


class LogPublic(BaseModel):
    job_id: int
    attempt: int
    log: str
    stream: Literal["output", "error"] = "output"
    path: str | None = Field(default=None, description="the file read (jobs with a workdir)")
    offset: int = Field(default=0, description="where `log` begins in the file")
    next_offset: int = Field(default=0, description="pass as offset to read what follows")
    state: str | None = Field(default=None, description="the job's state when read")


# JobPublic's fields that the record holds under the same name (the rest are renamed or
# computed below): a field added to the record and to the schema family appears here by itself.
_JOB_FIELDS_AS_RECORDED = tuple(
    name for name in JobPublic.model_fields if name in JobRecord.__dataclass_fields__
)


def job_public(
    job: JobRecord, tier_by_order: dict[int, str], *, environment: bool = False
) -> JobPublic:
    reservation = None
    if job.reserved_gpus > 0 and job.reserved_node_name and job.reserved_tier_name:
        reservation = ReservationPublic(
            node=job.reserved_node_name,
            tier=job.reserved_tier_name,
            gpus=job.reserved_gpus,
            of=job.num_gpus,
            since=job.reservation_since,
        )
    recorded = {name: getattr(job, name) for name in _JOB_FIELDS_AS_RECORDED}
    if not environment:
        recorded["environment"] = None
    return JobPublic(
        **recorded,
        user=job.user_name,
        lab=job.lab_name,
        min_tier=tier_by_order.get(job.minimum_tier_sort_order),
        state_label=state_label(job.state, job.reason),
        node=job.node_name,
        tier=job.tier_name,
        run_cost_tflop_s=job.run_cost,
        reservation=reservation,
        display_id=job.display_id,
    )
