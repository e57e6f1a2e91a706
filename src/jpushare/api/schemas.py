"""The API's request and response bodies (pydantic), in families per resource.

`XCreate` is what a client sends, `XPublic` what it gets back, `XsPublic` a list of them.
Every string a client sends is bounded and free of NUL characters and every number lies in
a range that makes sense for it (the bounds live here, next to the fields), so bad input is
a 422 VALIDATION_ERROR here and never a database error or an absurd job later. Request
bodies are strict: `"2"` or `true` is not a number of GPUs (pydantic's strict mode; a JSON
integer is still a valid float).
Records from the store become `XPublic` through the `*_public` functions at the end.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from jpushare import run_settings as job_run
from jpushare.ledger.eligibility import parse_dependency
from jpushare.ledger.job_arrays import parse_array
from jpushare.mail_types import MailType, check_mail_address, parse_mail_types
from jpushare.policy.fit import MAX_GPUS, MIN_GPUS
from jpushare.store.jobs import Eligibility
from jpushare.store.records import (
    JobRecord,
    LabRecord,
    NodeRecord,
    TierRecord,
    TokenRecord,
    UserRecord,
)
from jpushare.time_limits import TIME_LIMIT_FORMS, parse_time_limit, state_label
from jpushare.unix_accounts import ACCOUNT_NAME
from jpushare.vocabulary import AnswerCode, JobState, NodeState, ReleaseReason, Waiting

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# The most entries one page of a list answers (GET /v1/jobs; the queue's, GET /v1/queue):
# what one request may make the server hold at once.
MAX_LIST_LIMIT = 1000
MAX_QUEUE_LIMIT = 10_000


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def _trimmed_name(value: str) -> str:
    value = _no_nul(value).strip()
    if not value:
        raise ValueError("must not be empty")
    return value


Name = Annotated[str, Field(min_length=1, max_length=100), AfterValidator(_trimmed_name)]
"""A lab, user, tier or node name (the columns are VARCHAR(100) / TEXT)."""

UnixAccountName = Annotated[
    str, Field(min_length=1, max_length=64, pattern=f"^(?:{ACCOUNT_NAME.pattern})$")
]
"""A Unix account name (`jpushare.unix_accounts.ACCOUNT_NAME`)."""

JobId = Annotated[int, Field(ge=1, le=INT64_MAX)]
GpuCount = Annotated[int, Field(ge=MIN_GPUS, le=MAX_GPUS)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# Bounds of the numbers a client sends, in one place (the OpenAPI document shows them).
MIN_TIME_LIMIT_S = 1.0
MAX_TIME_LIMIT_S = 365 * 86400.0
TimeLimitS = Annotated[
    float,
    Field(
        ge=MIN_TIME_LIMIT_S,
        le=MAX_TIME_LIMIT_S,
        description="seconds, 1 s to 365 days",
    ),
]
MIN_TFLOPS = 0.001
MAX_TFLOPS = 1e6
Tflops = Annotated[float, Field(ge=MIN_TFLOPS, le=MAX_TFLOPS, description="per GPU")]
SortOrder = Annotated[int, Field(ge=-INT32_MAX, le=INT32_MAX)]


# --- jobs ---------------------------------------------------------------------------------


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


class JobCreate(JobBase, _In):
    """A job to queue (SPEC §2). `num_gpus` 1-8 for every role; `min_tier` by name."""

    name: Annotated[str, Field(max_length=200), AfterValidator(_no_nul)] = Field(
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
        AfterValidator(_no_nul),
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


class JobUpdate(_In):
    """What `PATCH /v1/jobs/{id}` may change while the job is queued (scontrol update)."""

    name: Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_no_nul)] | None = None
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


# --- why and the queue ---------------------------------------------------------------------


class PlacementReservation(BaseModel):
    job_id: int
    gpus: int
    of: int
    since: datetime | None


class PlacementLoan(BaseModel):
    """A run on GPUs lent from a reservation here (`reserved_gpus: lend-by-limit`): they
    count as busy, not reserved, until it ends by its time limit (`until`) at the latest."""

    job_id: int
    gpus: int
    lent_from_job_id: int
    until: datetime | None


class PlacementView(BaseModel):
    """One fit placement's numbers as recorded now (SPEC §8): the same figures, computed the
    same way, as `GET /v1/placements` shows, with the reservations held there."""

    node: str
    tier: str
    capacity: int
    busy: int
    reserved: int
    idle: int
    schedulable: bool
    reservations: list[PlacementReservation] = Field(default_factory=list)


class BlockingPublic(BaseModel):
    """The recorded reservation of the top job that holds GPUs this job could use (R4)."""

    job_id: int
    reservation: ReservationPublic


class DispatchPublic(BaseModel):
    node: str
    tier: str
    num_gpus: int


class PlannedActionPublic(BaseModel):
    """One thing the next dispatch cycle would do for a job: the policy run on what is
    recorded now, a projection and not a record. It carries no time: it happens when that
    cycle runs, if nothing changes before (a job ending, a submission, a node going down)."""

    action: Literal["start", "reserve", "absorb", "release"]
    node: str
    tier: str
    gpus: int = Field(description="GPUs it would start on, reserve, add, or release")
    reserved_after: int | None = Field(
        default=None, description="absorb: the reservation's size afterwards"
    )
    reason: ReleaseReason | None = Field(default=None, description="release: why")


class StartEstimate(BaseModel):
    """The start estimate fields that "why" and the queue share (one definition)."""

    estimated_start: datetime | None = Field(
        default=None,
        description="a projection (like squeue --start): when the policy, run forward from "
        "now, would start it; null when beyond the forecast or none could be made",
    )
    estimate_basis: str | None = Field(
        default=None,
        description="what its own run time was taken from in that forecast: time_limit, "
        "user_history or lab_history (the median completed run of its GPU count), default",
    )


class WhyPublic(StartEstimate):
    """The answer to "why isn't my job running?" (SPEC §8), with the numbers behind it.

    For a queued job, what is recorded is stated as fact: `rank` (1 for the top job), its
    `reservation`, the `blocking` reservation, the `placements` table and `best_idle` (the
    most idle GPUs on one fit placement, from that table). `next_cycle` (and `dispatch`, where
    it would start) is what the next cycle would do, a projection; the sentence says both,
    the projection as "at the next cycle …". `code` is the policy's WhyCode for the job as
    it is now (RESERVING only for a recorded reservation), or STARTING when the next cycle
    would dispatch it. For any other job `code` is its state and the sentence says what
    happened, from its history.
    """

    job_id: int
    state: JobState
    code: AnswerCode
    sentence: str
    rank: int | None = None
    queue_length: int | None = None
    top_job_id: int | None = None
    num_gpus: int
    min_tier: str | None = None
    fit_placements: int | None = None
    schedulable_fit_placements: int | None = None
    best_idle: int | None = None
    reservation: ReservationPublic | None = None
    blocking: BlockingPublic | None = None
    dispatch: DispatchPublic | None = None
    # Its run (or the one the next cycle starts) is on GPUs lent from this job's reservation
    # (`reserved_gpus: lend-by-limit`) until the end of its own time limit; else None.
    lent_from_job_id: int | None = None
    lent_until: datetime | None = None
    next_cycle: list[PlannedActionPublic] = Field(default_factory=list)
    placements: list[PlacementView] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="earlier events worth knowing")
    estimate_sentence: str | None = Field(
        default=None,
        description="the start estimate in words, a projection with what it assumes "
        '("Estimated to start around …, assuming …"); null without an estimate',
    )


class QueueEntryPublic(StartEstimate):
    rank: int
    job_id: int
    display_id: str = Field(default="", description="ARRAY_TASK for an array's task, else id")
    name: str
    user: str
    lab: str
    lab_usage_tflop_s: float
    num_gpus: int
    min_tier: str | None
    queue_entered_at: datetime
    reservation: ReservationPublic | None = Field(description="as recorded now")
    next_cycle: list[PlannedActionPublic] = Field(description="a projection, as in why")
    code: AnswerCode
    sentence: str


class QueuePublic(BaseModel):
    data: list[QueueEntryPublic]
    count: int = Field(description="entries in this page")
    queue_length: int
    top_job_id: int | None
    computed_at: datetime


class PlacementPublic(BaseModel):
    """One placement (node, tier) for people and for the LLM backfill router.

    `idle` GPUs are free for research jobs now; `reserved` ones are closed to other research
    jobs but keep serving LLM backfill (R4); `llm_backfill_gpus` = idle + reserved is what
    the router may use until it is told to yield; `llm_gpus` of them an LLM backfill server
    holds now (the keeper's servers, local or Slurm jobs of the backfill partition: "LLM" in
    `jpushare placements` and on the dashboard).
    """

    node: str
    tier: str
    tflops: float
    capacity: int
    busy: int
    reserved: int
    idle: int
    llm_backfill_gpus: int
    llm_gpus: int = 0
    schedulable: bool
    node_state: str
    node_state_reason: str | None
    drained: bool
    drain_reason: str | None
    reservations: list[PlacementReservation]
    lent: int = Field(default=0, description="busy GPUs that are lent from a reservation here")
    loans: list[PlacementLoan] = Field(default_factory=list)


class PlacementsPublic(BaseModel):
    data: list[PlacementPublic]
    count: int
    computed_at: datetime


# --- labs, tiers, nodes, users, tokens ------------------------------------------------------


class LabCreate(_In):
    name: Name


class LabPublic(BaseModel):
    name: str
    usage_tflop_s: float
    queued_jobs: int = 0
    running_jobs: int = 0
    created_at: datetime
    rank: int = Field(default=0, description="1 = served first (least usage)")
    share: float | None = Field(default=None, description="usage ÷ every lab's usage")
    in_flight_tflop_s: float = Field(
        default=0.0,
        description="held but not yet charged (charging is lazy): running jobs' GPU time and "
        "reservations' since they were last charged, × TFLOPS",
    )
    running_gpus: int = 0
    reserved_gpus: int = 0


class LabsPublic(BaseModel):
    data: list[LabPublic]
    count: int


class TierCreate(_In):
    name: Name
    tflops: Tflops
    sort_order: SortOrder
    max_gpus: GpuCount = 8
    auto_assign: bool = True
    partition: Annotated[str, Field(max_length=200), AfterValidator(_no_nul)] | None = None


class TierUpdate(_In):
    tflops: Tflops | None = None
    sort_order: SortOrder | None = None
    max_gpus: GpuCount | None = None
    auto_assign: bool | None = None
    partition: Annotated[str, Field(max_length=200), AfterValidator(_no_nul)] | None = None


class TierPublic(BaseModel):
    name: str
    tflops: float
    sort_order: int
    max_gpus: int
    auto_assign: bool
    partition: str | None


class TiersPublic(BaseModel):
    data: list[TierPublic]
    count: int


class NodeGpusUpdate(_In):
    """The node's GPUs, tier name -> count; tiers not named lose theirs."""

    gpus: dict[Name, Annotated[int, Field(ge=0, le=1024)]]


class NodeDrain(_In):
    reason: Annotated[str, Field(min_length=1, max_length=1000), AfterValidator(_no_nul)]


class GpuSchedulable(_In):
    schedulable: bool


class NodePublic(BaseModel):
    name: str
    state: NodeState
    state_reason: str | None
    drained: bool
    drain_reason: str | None
    schedulable: bool
    observed_at: datetime | None
    updated_at: datetime
    gpus: dict[str, int]


class NodesPublic(BaseModel):
    data: list[NodePublic]
    count: int


class UserCreate(_In):
    name: Name
    lab: Name
    role: Literal["student", "pi", "admin"] = "student"
    unix_user: UnixAccountName | None = Field(
        default=None,
        description="the Unix account the user's jobs run as and MUNGE sign-in maps to; "
        "default: the user's name. It must exist on the service's host (422 "
        "UNKNOWN_UNIX_ACCOUNT otherwise)",
    )
    allow_root: bool = Field(
        default=False,
        description="map the user to an account with uid 0 (root): refused (422 "
        "ROOT_ACCOUNT) unless true, since such a user's jobs would run as root",
    )


class UserPublic(BaseModel):
    id: int
    name: str
    lab: str
    role: str
    unix_user: str = Field(description="the Unix account the user's jobs run as")
    created_at: datetime


class UsersPublic(BaseModel):
    data: list[UserPublic]
    count: int


class TokenCreate(_In):
    label: Annotated[str, Field(max_length=200), AfterValidator(_no_nul)] = ""


class TokenPublic(BaseModel):
    id: int
    user_id: int
    label: str
    created_at: datetime
    revoked_at: datetime | None


class TokensPublic(BaseModel):
    data: list[TokenPublic]
    count: int


class IssuedTokenPublic(BaseModel):
    """A new token. `secret` is shown this once; only its hash is stored."""

    token: TokenPublic
    secret: str


class RevokedPublic(BaseModel):
    token_id: int
    revoked: bool = Field(description="False if it was revoked already")


class DispatcherHealthPublic(BaseModel):
    """The dispatcher as the database records it (every API process reads the same)."""

    state: Literal["ok", "stale", "none"] = Field(
        description="stale: no cycle succeeded for `stale_after_s`; none: never ran"
    )
    last_success_at: datetime | None
    holder: str | None = Field(description="the process holding the dispatcher lease")
    stale_after_s: float


class HealthPublic(BaseModel):
    """200 with `status` ok or degraded (the API works; the dispatcher may not: `reason`
    says why); 503 when the database cannot be reached (this process cannot serve)."""

    status: Literal["ok", "degraded"]
    database: Literal["ok", "unreachable"]
    time: datetime
    reason: str | None = Field(default=None, description="why degraded, for people")
    dispatcher: DispatcherHealthPublic | None = Field(
        default=None, description="null when the database could not be read"
    )


# --- the watch-list (SPEC §10), GET /v1/stats/watch -----------------------------------------


class ReservationCountsPublic(BaseModel):
    started: int
    released: dict[str, int] = Field(description="reason (filled, swap, r3, r5, cancel) -> count")
    held: int = Field(description="started in the window and not released by its end")
    failed: int = Field(description="released by r3, r5 or cancel")
    failed_rate: float | None = Field(description="failed / started; null without reservations")


class HoldPublic(BaseModel):
    """Seconds from start to release, over the released reservations."""

    count: int
    mean: float | None
    p95: float | None
    max: float | None


class WatchUsagePublic(BaseModel):
    ended_jobs: int
    charged_tflop_s: float
    reservation_tflop_s: float
    reservation_share: float | None = Field(description="reservation / charged")


class WatchBackfillPublic(BaseModel):
    """LLM backfill (issue 22): GPU-hours reserved in the window, and what the backfill
    keeper measured since `keeper_since` (its first tick; null: no keeper ran here)."""

    reserved_gpu_hours: float
    backfill_reserved_gpu_hours: float
    backfill_idle_gpu_hours: float
    idle_gpu_hours: float = Field(description="no research job and no backfill server")
    served_share_of_reserved: float | None = Field(
        description="backfill on reserved GPUs / reserved GPU-hours (capped at 1)"
    )
    yields: int
    yield_mean_s: float | None = Field(description="research dispatch -> its GPUs free")
    yield_max_s: float | None
    keeper_since: float | None = Field(description="UNIX seconds")


class SizeClassPublic(BaseModel):
    """The ended jobs of one size (GPUs asked for)."""

    jobs: int
    run_tflop_s: float
    reservation_tflop_s: float
    charged_tflop_s: float
    burden: float | None = Field(description="charged / run: 1.0 = no reservation cost")
    started: int = Field(description="jobs that ever started")
    mean_wait_s: float | None = Field(description="submission to first dispatch")


class WatchPublic(BaseModel):
    """SPEC §10 over [since, until]: reservations that started and jobs that ended in it."""

    since: datetime
    until: datetime
    reservations: ReservationCountsPublic
    reservations_by_lab: dict[str, ReservationCountsPublic]
    hold_s: HoldPublic
    usage: WatchUsagePublic
    by_gpus: dict[str, SizeClassPublic] = Field(description="keyed by GPU count")
    backfill: WatchBackfillPublic | None = None


class ErrorBody(BaseModel):
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class ErrorPublic(BaseModel):
    """Every error response: `{"error": {"code", "message", "details"}}`."""

    error: ErrorBody


# --- records -> public ----------------------------------------------------------------------


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


def lab_public(lab: LabRecord, counts: dict[str, int] | None = None) -> LabPublic:
    c = counts or {}
    return LabPublic(
        name=lab.name,
        usage_tflop_s=lab.cumulative_usage,
        queued_jobs=c.get("queued", 0),
        running_jobs=c.get("running", 0),
        created_at=lab.created_at,
    )


def tier_public(t: TierRecord) -> TierPublic:
    return TierPublic(
        name=t.name,
        tflops=t.tflops,
        sort_order=t.sort_order,
        max_gpus=t.max_gpus,
        auto_assign=t.auto_assign,
        partition=t.partition,
    )


def node_public(n: NodeRecord) -> NodePublic:
    return NodePublic(
        name=n.name,
        state=n.state,
        state_reason=n.state_reason,
        drained=n.admin_drained,
        drain_reason=n.drain_reason,
        schedulable=n.schedulable,
        observed_at=n.observed_at,
        updated_at=n.updated_at,
        gpus=dict(n.gpus),
    )


def user_public(u: UserRecord) -> UserPublic:
    return UserPublic(
        id=u.id,
        name=u.name,
        lab=u.lab_name,
        role=u.role,
        unix_user=u.unix_user,
        created_at=u.created_at,
    )


def token_public(t: TokenRecord) -> TokenPublic:
    return TokenPublic(
        id=t.id, user_id=t.user_id, label=t.label, created_at=t.created_at, revoked_at=t.revoked_at
    )
