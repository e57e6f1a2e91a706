"""The database schema as typed SQLAlchemy ORM classes, and the enums its CHECKs enforce.

Tables are created only by the Alembic migrations in `migrations/` (a test checks that the
migrations and these classes agree); never call `Base.metadata.create_all` outside tests.

Key choices (see also the module docstrings of the repository modules):

- `jobs.id` is an integer (what people type: `jpushare why 42`). The policy sees it as
  the text `str(id)`; it compares ids as text only to break ties between jobs of one lab
  that entered the queue in the same microsecond, where any fixed order is fair.
- `gpu_tiers.id` is a UUID (SPEC §7: `reserved_tier_id UUID`); the policy names tiers by
  `name`, so the store maps name <-> id at its boundary.
- Node state lives in a small `nodes` table, separate from `gpu_resources`: a node's state
  is one fact per node (not per GPU), it has two independent sources (what the executor
  observes: up/down/drain; what an admin decided: drained with a reason) and both must
  survive an inventory sync that rewrites the node's GPUs. A placement is schedulable when
  the node is observed `up` and not admin-drained.
- Every timestamp is aware UTC (`UtcDateTime`); usage and costs are TFLOP-seconds in
  DOUBLE PRECISION (`reservation_gpu_seconds` keeps the SPEC §7 name despite the unit).
- A job's bill is `run_cost + reservation_gpu_seconds`; `charged_tflop_s` says how much of
  it has reached the lab, so each charge adds only the difference: every TFLOP-second
  reaches the lab exactly once even across OOM attempts (SPEC §4 invariant).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from jpushare.ledger.states import EventKind as EventKind  # the ledger's, where it lives
from jpushare.store.times import UtcDateTime

# The states are the shared vocabulary's; named here too, next to the CHECKs that use them.
from jpushare.vocabulary import ACTIVE_STATES as ACTIVE_STATES
from jpushare.vocabulary import ENDED_STATES as ENDED_STATES
from jpushare.vocabulary import JobState as JobState
from jpushare.vocabulary import NodeState, Waiting

# Integer primary keys that autoincrement on both backends (SQLite needs INTEGER exactly).
BigIntPk = BigInteger().with_variant(Integer(), "sqlite")

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Role(StrEnum):
    STUDENT = "student"
    PI = "pi"
    ADMIN = "admin"


_RESOURCES_CHECK = (
    "(cpus_per_gpu IS NULL OR cpus_per_gpu >= 1)"
    " AND (mem_per_gpu_mb IS NULL OR mem_per_gpu_mb >= 1)"
)


def _in(column: str, values: tuple[str, ...]) -> str:
    quoted = ", ".join("'" + str(v) + "'" for v in values)
    return f"{column} IN ({quoted})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UtcDateTime(),
        dict[str, Any]: JSON(),
    }


class Lab(Base):
    __tablename__ = "labs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    # SPEC §1 lab usage, TFLOP-seconds; changed only when a job (or an attempt) ends.
    cumulative_usage: Mapped[float] = mapped_column(Double, server_default=text("0"))
    created_at: Mapped[datetime]


class User(Base):
    __tablename__ = "users"
    __table_args__ = (CheckConstraint(_in("role", tuple(Role)), name="role"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    lab_id: Mapped[int] = mapped_column(ForeignKey("labs.id", ondelete="RESTRICT"), index=True)
    role: Mapped[str] = mapped_column(String(16))
    # The Unix account the user's jobs run as and MUNGE credentials map to (default: name).
    unix_user: Mapped[str] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime]


class ApiToken(Base):
    """A bearer token: only the SHA-256 of the secret is stored, never the secret."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    label: Mapped[str] = mapped_column(String(200), server_default=text("''"))
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class GpuTier(Base):
    """SPEC §1 tier."""

    __tablename__ = "gpu_tiers"
    __table_args__ = (
        CheckConstraint("tflops > 0", name="tflops_positive"),
        CheckConstraint("max_gpus BETWEEN 1 AND 8", name="max_gpus"),
        CheckConstraint(_RESOURCES_CHECK, name="resources"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    tflops: Mapped[float] = mapped_column(Double)
    sort_order: Mapped[int] = mapped_column(Integer)
    max_gpus: Mapped[int] = mapped_column(Integer, server_default=text("8"))
    auto_assign: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    partition: Mapped[str | None] = mapped_column(Text)
    # Defaults for a job that asks for none (sbatch --cpus-per-gpu / --mem-per-gpu).
    cpus_per_gpu: Mapped[int | None] = mapped_column(Integer)
    mem_per_gpu_mb: Mapped[int | None] = mapped_column(Integer)


class Node(Base):
    """One node's state: observed from the executor, and an admin's drain on top of it."""

    __tablename__ = "nodes"
    __table_args__ = (CheckConstraint(_in("state", tuple(NodeState)), name="state"),)

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    state: Mapped[str] = mapped_column(String(16), server_default=text("'up'"))
    state_reason: Mapped[str | None] = mapped_column(Text)  # the executor's, if any
    admin_drained: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    drain_reason: Mapped[str | None] = mapped_column(Text)  # the admin's
    observed_at: Mapped[datetime | None]
    updated_at: Mapped[datetime]


class GpuResource(Base):
    """SPEC §1 GPU: one device of one tier on one node."""

    __tablename__ = "gpu_resources"
    __table_args__ = (
        UniqueConstraint("node_name", "tier_id", "gpu_index"),
        CheckConstraint("gpu_index >= 0", name="gpu_index"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_name: Mapped[str] = mapped_column(
        ForeignKey("nodes.name", ondelete="CASCADE", onupdate="CASCADE")
    )
    tier_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("gpu_tiers.id", ondelete="RESTRICT"), index=True
    )
    gpu_index: Mapped[int] = mapped_column(Integer)
    schedulable: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))


JOB_STATES = tuple(JobState)


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint("num_gpus BETWEEN 1 AND 8", name="num_gpus"),
        CheckConstraint(_in("state", JOB_STATES), name="state"),
        CheckConstraint("attempts >= 0", name="attempts"),
        CheckConstraint(_RESOURCES_CHECK, name="resources"),
        CheckConstraint("reserved_gpus >= 0 AND reserved_gpus <= num_gpus", name="reserved_gpus"),
        # A reservation is all of its columns or none, and only a queued job holds one.
        CheckConstraint(
            "(reserved_gpus = 0 AND reserved_node_name IS NULL AND reserved_tier_id IS NULL)"
            " OR (reserved_gpus > 0 AND reserved_node_name IS NOT NULL"
            " AND reserved_tier_id IS NOT NULL AND state = 'GLOBAL_QUEUE_WAIT')",
            name="reservation",
        ),
        # The queue: state first, then what the snapshot reads in fair-share order.
        Index("ix_jobs_queue", "state", "lab_id", "queue_entered_at", "id"),
        # SPEC §7: the reservations, a handful of rows among many.
        Index(
            "ix_jobs_reserved",
            "reserved_node_name",
            "reserved_tier_id",
            postgresql_where=text("reserved_gpus > 0"),
            sqlite_where=text("reserved_gpus > 0"),
        ),
        Index("ix_jobs_user_id", "user_id", "id"),
        Index("ix_jobs_lab_id", "lab_id", "id"),
        # Revision 0007: the queued jobs not yet eligible, and the tasks of each array.
        CheckConstraint(_in("waiting", tuple(Waiting)), name="waiting"),
        Index(
            "ix_jobs_waiting",
            "waiting",
            postgresql_where=text("waiting IS NOT NULL"),
            sqlite_where=text("waiting IS NOT NULL"),
        ),
        Index(
            "ix_jobs_array_job_id",
            "array_job_id",
            "array_task_id",
            postgresql_where=text("array_job_id IS NOT NULL"),
            sqlite_where=text("array_job_id IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigIntPk, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    command: Mapped[str] = mapped_column(Text)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="RESTRICT"))
    lab_id: Mapped[int] = mapped_column(ForeignKey("labs.id", ondelete="RESTRICT"))
    num_gpus: Mapped[int] = mapped_column(Integer)
    minimum_tier_sort_order: Mapped[int] = mapped_column(Integer)
    time_limit_s: Mapped[float | None] = mapped_column(Double)
    # Where and with what the job runs, as its owner (sbatch's --chdir, --export, --output,
    # --error, --cpus-per-gpu, --mem-per-gpu). NULL on jobs from before revision 0003.
    workdir: Mapped[str | None] = mapped_column(Text)
    environment: Mapped[dict[str, Any] | None]
    output_path: Mapped[str | None] = mapped_column(Text)  # may hold %j (job) and %a (attempt)
    error_path: Mapped[str | None] = mapped_column(Text)  # NULL: stderr goes with stdout
    cpus_per_gpu: Mapped[int | None] = mapped_column(Integer)  # NULL: the tier's default
    mem_per_gpu_mb: Mapped[int | None] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(32))
    # Times (aware UTC). queue_entered_at survives OOM / node-failure requeues (SPEC §5).
    submitted_at: Mapped[datetime]
    queue_entered_at: Mapped[datetime]
    dispatched_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    # Placement of the current (or last) attempt.
    node_name: Mapped[str | None] = mapped_column(Text)
    tier_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("gpu_tiers.id", ondelete="RESTRICT")
    )
    executor_id: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Text)
    # Costs, TFLOP-seconds. run_cost sums every attempt's run.
    run_cost: Mapped[float] = mapped_column(Double, server_default=text("0"))
    charged_tflop_s: Mapped[float] = mapped_column(Double, server_default=text("0"))
    # SPEC §7, exactly.
    reserved_gpus: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    reserved_node_name: Mapped[str | None] = mapped_column(Text)
    reserved_tier_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("gpu_tiers.id", ondelete="RESTRICT")
    )
    reservation_since: Mapped[datetime | None]
    reservation_last_accrued_at: Mapped[datetime | None]
    reservation_gpu_seconds: Mapped[float] = mapped_column(Double, server_default=text("0"))
    # Revision 0007 (`ledger.eligibility`): NULL `waiting` is in the policy's queue when
    # queued; else why not. `dependency` is sbatch's, its ids resolved to jobs at submit.
    waiting: Mapped[str | None] = mapped_column(String(32))
    held: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    dependency: Mapped[str | None] = mapped_column(Text)
    kill_on_invalid_dep: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    array_job_id: Mapped[int | None] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"))
    array_task_id: Mapped[int | None] = mapped_column(Integer)
    array_limit: Mapped[int | None] = mapped_column(Integer)  # --array …%K
    # The lending option (`reserved_gpus: lend-by-limit`, revision 0009): the current (or
    # last) attempt runs on GPUs lent from this job's reservation, until its time limit.
    lent_from_job_id: Mapped[int | None] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite")
    )
    lent_until: Mapped[datetime | None]


class JobEvent(Base):
    """One thing that happened to a job, for "why" and for people auditing a bill."""

    __tablename__ = "job_events"
    __table_args__ = (Index("ix_job_events_job_id", "job_id", "id"),)

    id: Mapped[int] = mapped_column(BigIntPk, primary_key=True)
    job_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"),
        ForeignKey("jobs.id", ondelete="CASCADE"),
    )
    at: Mapped[datetime]
    kind: Mapped[str] = mapped_column(String(32))
    from_state: Mapped[str | None] = mapped_column(String(32))
    to_state: Mapped[str | None] = mapped_column(String(32))
    detail: Mapped[dict[str, Any] | None]
