"""Service settings, read from the environment when asked (never at import time).

Every setting has an embedded default, so `jpushare serve` runs on a fresh machine with
SQLite and the local executor. Variables:

- JPUSHARE_DATABASE_URL: SQLAlchemy URL (postgresql+psycopg://… for PostgreSQL);
  default sqlite:///<state dir>/jpushare.sqlite
- JPUSHARE_STATE_DIR: SQLite file, local executor's runs and logs; default ./var
- JPUSHARE_EXECUTOR: `local` (default) or `slurm`
- JPUSHARE_CYCLE_S: seconds between dispatch cycles; default 5
- JPUSHARE_LEASE_S: seconds a dispatcher's lease lasts without a renewal: how long a
  frozen or cut-off leader keeps the standbys waiting; default three cycles
- JPUSHARE_ROUTER_URL: the LLM backfill router; unset = no router
- JPUSHARE_HOST / JPUSHARE_PORT: where the API listens; default 127.0.0.1 / 8000
- JPUSHARE_CLUSTER: a cluster file (simulator format) declaring GPUs for the local executor
- JPUSHARE_MAX_BODY_BYTES: request bodies over it get 413 before they are read; default
  1048576 (1 MiB)
- JPUSHARE_PLACEMENT: where a job starts inside a tier (SPEC §1): `pack` (best fit, the
  default) or `spread` (most idle GPUs first); the dispatcher and the API's answers use it
- JPUSHARE_POLICY: the policy the dispatcher runs each cycle, by its simulator name
  (`jpushare.policy.peers.POLICIES`): `reservation` (SPEC §3, the default), or a peer
  (`hol-skip`, `fifo`, `backfill`) that a site runs for comparison; the API's "why", queue
  and start estimates project the same one
- JPUSHARE_TOP_JOB: which job R2/R3 refer to (SPEC decision 7): `first-waiting` (the first
  job of the order that cannot start in the cycle, the default) or `first-queued` (queue[0])
- JPUSHARE_RESERVED_GPUS: what may run on GPUs a reservation holds (SPEC "Options beyond
  the note"): `llm-only` (R4, LLM backfill only, the default) or `lend-by-limit` (a job
  whose time limit ends by the reservation's projected fill may run on them)

For `JPUSHARE_EXECUTOR=local` (the local executor's limits on every run; ignored by Slurm):

- JPUSHARE_LOCAL_PIDS_MAX: at most this many processes and threads per run (its cgroup's
  pids.max, where cgroups are used); `0` for no limit; default 4096
- JPUSHARE_LOCAL_OUTPUT_MAX_BYTES: no file a job writes (its output included) may grow past
  this many bytes (RLIMIT_FSIZE: the writer gets SIGXFSZ and the run ends FAILED saying
  so); `0` for no limit; default 68719476736 (64 GiB)

What one client may hold of an API process (`jpushare.service.http_server`; each of
`--workers N` has its own): a connection that is refused or dropped costs no database slot.

- JPUSHARE_HEADER_TIMEOUT_S: a request's headers must arrive whole within it of the
  connection's start (or of the previous response), else 408 and the connection is
  closed; default 10
- JPUSHARE_BODY_TIMEOUT_S: a request's body must arrive whole within it of its headers,
  else 408 (REQUEST_TIMEOUT) and the connection is closed; default 10
- JPUSHARE_MAX_CONNECTIONS: open connections per API process; more get 503
  (TOO_MANY_CONNECTIONS) and are closed; default: the descriptors left after
  JPUSHARE_RESERVED_FDS, at most 4096
- JPUSHARE_MAX_CONNECTIONS_PER_PEER: open connections per client address; default 256
  (at most a quarter of JPUSHARE_MAX_CONNECTIONS)
- JPUSHARE_RESERVED_FDS: file descriptors kept for the dispatcher, the database and the
  executor, never given to connections (`serve` raises its soft descriptor limit to the
  hard one first); default 256

Per-user limits on submissions (POST /v1/jobs answers 429 QUOTA_EXCEEDED beyond them,
for every role, admins included; 0 = no limit):

- JPUSHARE_MAX_ACTIVE_JOBS_PER_USER: jobs one user may have that have not ended (queued,
  dispatched or running); default 1000
- JPUSHARE_MAX_JOB_BYTES_PER_USER: bytes of command + environment (as stored) those jobs
  may hold together; default 67108864 (64 MiB)

For `JPUSHARE_EXECUTOR=slurm` (the Slurm executor's; ignored by the local one):

- JPUSHARE_SLURM_LOG_DIR: where job output goes (`<prefix>-<job>-<attempt>.out`); must be
  readable by the service and writable from every compute node (a shared file system);
  default <state dir>/slurm-logs
- JPUSHARE_SLURM_GPU_TYPES: GRES type -> tier name where they differ, `gres=tier,...`
  (`geforce_rtx_4090=rtx4090,a100=a100`); default empty: a GRES type is its tier's name
- JPUSHARE_SLURM_SBATCH_ARGS: extra sbatch options for every job, split like a shell
  (`--account=lab --mem-per-gpu=16G`); default none
- JPUSHARE_SLURM_PREFIX: first word of JPU-Share's Slurm job names (`jps-<job>-<attempt>`),
  one per installation sharing a cluster; default jps
- JPUSHARE_SLURM_SUBMIT_AS_USER: `yes` to submit each job `--uid/--gid` of its owner (root
  or Slurm's SlurmUser), `no` to submit every job as the service; default: yes when root
- JPUSHARE_SLURM_BACKFILL_PARTITION: the partition of the LLM backfill jobs that research
  jobs preempt (README, LLM backfill on Slurm): their GPUs count as free; `none`: no
  such partition; default backfill (a cluster without it simply has no backfill jobs)

The tier -> partition mapping is not a setting: it is each tier's `partition` in the
database (`jpushare init --cluster FILE` reads it from the cluster file's tiers).
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar

from jpushare.policy.options import (
    RESERVED_GPUS,
    TOP_JOBS,
    ReservedGpus,
    TopJob,
    parse_reserved_gpus,
    parse_top_job,
)
from jpushare.policy.order import PLACEMENT_ORDERS, PlacementOrder, parse_placement_order
from jpushare.policy.peers import POLICIES

DEFAULT_POLICY = "reservation"  # SPEC §3

DEFAULT_MAX_BODY_BYTES = 1024 * 1024  # a request body over it gets 413 (api.body_limit)
DEFAULT_LOCAL_PIDS_MAX = 4096  # a fork bomb's box; threads count (PyTorch has many)
DEFAULT_LOCAL_OUTPUT_MAX_BYTES = 64 << 30  # big enough for one checkpoint file
_LIMIT_BOUND = 2**62  # the most a limit setting takes (an int64 column or rlimit holds it)


class ConfigError(ValueError):
    """A setting has a value the service cannot use; the message names it."""


def env_number(e: Mapping[str, str], name: str, default: float, least: float, most: float) -> float:
    """Setting `name` of `e` as a number from `least` to `most`; `default` when unset.
    The one reading of such settings (here and in `jpushare.notify.settings`)."""
    text = e.get(name, "").strip()
    try:
        value = float(text) if text else default
    except ValueError:
        raise ConfigError(f"{name} must be a number, not {text!r}") from None
    if not least <= value <= most:  # also refuses NaN
        raise ConfigError(f"{name} must be between {least:g} and {most:g}, not {text}")
    return value


# --- What one client may hold of an API process (service.http_server) ---

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 10.0
DEFAULT_RESERVED_FDS = 256
DEFAULT_MAX_CONNECTIONS = 4096  # the most the derived default gives
DEFAULT_MAX_CONNECTIONS_PER_PEER = 256


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """The connection settings (module docstring); None: derived from the fd limit."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    max_connections: int | None = None
    max_connections_per_peer: int | None = None
    reserved_fds: int = DEFAULT_RESERVED_FDS


def load_connection_settings(e: Mapping[str, str]) -> ConnectionSettings:
    """The JPUSHARE_*_TIMEOUT_S / *CONNECTIONS* / RESERVED_FDS settings of `e`."""

    def seconds(name: str, default: float) -> float:
        text = e.get(name, "").strip()
        try:
            value = float(text) if text else default
        except ValueError:
            raise ConfigError(f"{name} must be a number of seconds, not {text!r}") from None
        if not 0 < value <= 3600:  # also refuses NaN
            raise ConfigError(f"{name} must be above 0 and at most 3600 seconds, not {text}")
        return value

    def count(name: str, least: int) -> int | None:
        text = e.get(name, "").strip()
        if not text:
            return None
        if not text.isdigit() or not least <= int(text) <= 10**7:
            raise ConfigError(f"{name} must be a whole number from {least}, not {text!r}")
        return int(text)

    reserved = count("JPUSHARE_RESERVED_FDS", 32)
    return ConnectionSettings(
        header_timeout_s=seconds("JPUSHARE_HEADER_TIMEOUT_S", DEFAULT_HEADER_TIMEOUT_S),
        body_timeout_s=seconds("JPUSHARE_BODY_TIMEOUT_S", DEFAULT_BODY_TIMEOUT_S),
        max_connections=count("JPUSHARE_MAX_CONNECTIONS", 1),
        max_connections_per_peer=count("JPUSHARE_MAX_CONNECTIONS_PER_PEER", 1),
        reserved_fds=DEFAULT_RESERVED_FDS if reserved is None else reserved,
    )


# --- per-user quotas -------------------------------------------------------------------

DEFAULT_MAX_ACTIVE_JOBS_PER_USER = 1000
DEFAULT_MAX_JOB_BYTES_PER_USER = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class UserQuotas:
    """What one user's jobs that have not ended may add up to; None: no limit. They bound
    what one account can make the service store and carry (a flood of submissions, or
    large environments that every read then loads)."""

    max_active_jobs: int | None = DEFAULT_MAX_ACTIVE_JOBS_PER_USER
    max_job_bytes: int | None = DEFAULT_MAX_JOB_BYTES_PER_USER


def load_user_quotas(env: Mapping[str, str] | None = None) -> UserQuotas:
    """The quota settings alone (the API reads them when it is built)."""
    e = os.environ if env is None else env
    return UserQuotas(
        max_active_jobs=_limit(
            e, "JPUSHARE_MAX_ACTIVE_JOBS_PER_USER", DEFAULT_MAX_ACTIVE_JOBS_PER_USER, 1, "jobs"
        ),
        max_job_bytes=_limit(
            e, "JPUSHARE_MAX_JOB_BYTES_PER_USER", DEFAULT_MAX_JOB_BYTES_PER_USER, 1, "bytes"
        ),
    )


@dataclass(frozen=True, slots=True)
class Settings:
    database_url: str
    state_dir: Path
    executor: str
    cycle_s: float
    router_url: str | None
    host: str
    port: int
    cluster_file: Path | None
    slurm_log_dir: Path | None = None  # None: <state dir>/slurm-logs
    slurm_gpu_types: Mapping[str, str] = field(default_factory=dict)  # GRES type -> tier
    slurm_sbatch_args: tuple[str, ...] = ()
    slurm_prefix: str = "jps"
    slurm_backfill_partition: str | None = "backfill"
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    placement_order: PlacementOrder = PlacementOrder.PACK
    slurm_submit_as_user: bool | None = None  # None: when the service runs as root
    lease_s: float | None = None  # None: LEASE_CYCLES cycles
    policy: str = DEFAULT_POLICY  # a name of `POLICIES`
    local_pids_max: int | None = DEFAULT_LOCAL_PIDS_MAX  # None: no limit
    local_output_max_bytes: int | None = DEFAULT_LOCAL_OUTPUT_MAX_BYTES  # None: no limit
    connections: ConnectionSettings = field(default_factory=ConnectionSettings)
    # Per-user quotas (their own block, `load_user_quotas`).
    user_quotas: UserQuotas = field(default_factory=UserQuotas)
    top_job: TopJob = TopJob.FIRST_WAITING  # JPUSHARE_TOP_JOB (SPEC decision 7)
    reserved_gpus: ReservedGpus = ReservedGpus.LLM_ONLY  # JPUSHARE_RESERVED_GPUS (lending)

    @property
    def dispatcher_lease_s(self) -> float:
        """How long the dispatcher's lease lasts without a renewal (`dispatcher.lock`)."""
        return self.lease_s if self.lease_s is not None else LEASE_CYCLES * self.cycle_s

    @property
    def slurm_logs(self) -> Path:
        """Where the Slurm executor writes job output."""
        return self.slurm_log_dir or self.state_dir / "slurm-logs"


# A leader renews its lease every cycle: three lengths ride out a slow cycle or two.
LEASE_CYCLES = 3

# A Slurm job name and a log file name are built from the prefix: keep it plain.
_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
_NAME = re.compile(r"[A-Za-z0-9_.:+-]+")


def parse_gpu_types(text: str) -> dict[str, str]:
    """`gres=tier,gres=tier` -> {GRES type: tier name}; ConfigError names the bad part."""
    out: dict[str, str] = {}
    tiers: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        gres, sep, tier = (x.strip() for x in part.partition("="))
        if not sep or not _NAME.fullmatch(gres) or not _NAME.fullmatch(tier):
            raise ConfigError(
                f"JPUSHARE_SLURM_GPU_TYPES: {part!r} is not GRES_TYPE=TIER "
                "(e.g. geforce_rtx_4090=rtx4090,a100=a100)"
            )
        if gres in out:
            raise ConfigError(f"JPUSHARE_SLURM_GPU_TYPES: GRES type {gres!r} is mapped twice")
        if tier in tiers:
            raise ConfigError(
                f"JPUSHARE_SLURM_GPU_TYPES: tier {tier!r} is mapped from two GRES types "
                f"({tiers[tier]!r} and {gres!r}); a tier is one GPU model"
            )
        out[gres] = tier
        tiers[tier] = gres
    return out


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Settings from `env` (default: the process environment), with clear errors."""
    e = os.environ if env is None else env
    state_dir = Path(e.get("JPUSHARE_STATE_DIR", "var"))
    url = e.get("JPUSHARE_DATABASE_URL") or f"sqlite:///{state_dir / 'jpushare.sqlite'}"
    executor = e.get("JPUSHARE_EXECUTOR", "local")
    if executor not in ("local", "slurm"):
        raise ConfigError(f"JPUSHARE_EXECUTOR must be 'local' or 'slurm', not {executor!r}")
    try:
        cycle_s = float(e.get("JPUSHARE_CYCLE_S", "5"))
        port = int(e.get("JPUSHARE_PORT", "8000"))
    except ValueError as exc:
        raise ConfigError(f"JPUSHARE_CYCLE_S / JPUSHARE_PORT must be numbers: {exc}") from exc
    if cycle_s <= 0:
        raise ConfigError("JPUSHARE_CYCLE_S must be positive")
    lease_s = _lease_s(e.get("JPUSHARE_LEASE_S", "").strip(), cycle_s)
    cluster = e.get("JPUSHARE_CLUSTER")
    log_dir = e.get("JPUSHARE_SLURM_LOG_DIR", "").strip()
    try:
        sbatch_args = tuple(shlex.split(e.get("JPUSHARE_SLURM_SBATCH_ARGS", "")))
    except ValueError as exc:
        raise ConfigError(f"JPUSHARE_SLURM_SBATCH_ARGS: {exc}") from exc
    try:
        max_body = int(e.get("JPUSHARE_MAX_BODY_BYTES", "").strip() or DEFAULT_MAX_BODY_BYTES)
    except ValueError as exc:
        raise ConfigError(f"JPUSHARE_MAX_BODY_BYTES must be a number of bytes: {exc}") from exc
    if not 1024 <= max_body <= 2**40:
        raise ConfigError("JPUSHARE_MAX_BODY_BYTES must be between 1024 and 2**40 bytes")
    prefix = e.get("JPUSHARE_SLURM_PREFIX", "").strip() or "jps"
    if not _PREFIX.fullmatch(prefix):
        raise ConfigError(
            f"JPUSHARE_SLURM_PREFIX must be a letter then up to 31 letters, digits or _, "
            f"not {prefix!r}"
        )
    placement = _choice(
        e, "JPUSHARE_PLACEMENT", PlacementOrder.PACK.value, parse_placement_order, PLACEMENT_ORDERS
    )
    raw_policy = e.get("JPUSHARE_POLICY", "").strip() or DEFAULT_POLICY
    policy = raw_policy.lower()
    if policy not in POLICIES:
        raise ConfigError(
            f"JPUSHARE_POLICY must be one of {', '.join(POLICIES)}, not {raw_policy!r}"
        )
    as_user_text = e.get("JPUSHARE_SLURM_SUBMIT_AS_USER", "").strip().lower()
    as_user = {
        "": None,
        "yes": True,
        "true": True,
        "1": True,
        "no": False,
        "false": False,
        "0": False,
    }
    if as_user_text not in as_user:
        raise ConfigError(f"JPUSHARE_SLURM_SUBMIT_AS_USER must be yes or no, not {as_user_text!r}")
    return Settings(
        database_url=url,
        state_dir=state_dir,
        executor=executor,
        cycle_s=cycle_s,
        router_url=e.get("JPUSHARE_ROUTER_URL") or None,
        host=e.get("JPUSHARE_HOST", "127.0.0.1"),
        port=port,
        cluster_file=Path(cluster) if cluster else None,
        slurm_log_dir=Path(log_dir) if log_dir else None,
        slurm_gpu_types=parse_gpu_types(e.get("JPUSHARE_SLURM_GPU_TYPES", "")),
        slurm_sbatch_args=sbatch_args,
        slurm_prefix=prefix,
        slurm_backfill_partition=_backfill_partition(e),
        max_body_bytes=max_body,
        placement_order=placement,
        slurm_submit_as_user=as_user[as_user_text],
        lease_s=lease_s,
        policy=policy,
        local_pids_max=_limit(e, "JPUSHARE_LOCAL_PIDS_MAX", DEFAULT_LOCAL_PIDS_MAX, 16),
        local_output_max_bytes=_limit(
            e, "JPUSHARE_LOCAL_OUTPUT_MAX_BYTES", DEFAULT_LOCAL_OUTPUT_MAX_BYTES, 1 << 20
        ),
        connections=load_connection_settings(e),
        user_quotas=load_user_quotas(e),
        # which job R2/R3 refer to (SPEC decision 7)
        top_job=_choice(e, "JPUSHARE_TOP_JOB", TopJob.FIRST_WAITING.value, parse_top_job, TOP_JOBS),
        # R4 (`llm-only`) or the lending option
        reserved_gpus=_choice(
            e,
            "JPUSHARE_RESERVED_GPUS",
            ReservedGpus.LLM_ONLY.value,
            parse_reserved_gpus,
            RESERVED_GPUS,
        ),
    )


_Choice = TypeVar("_Choice")


def _choice(
    e: Mapping[str, str],
    name: str,
    default: str,
    parse: Callable[[str], _Choice],
    choices: Iterable[str],
) -> _Choice:
    """Setting `name`: one of `choices`, read by `parse` (which raises ValueError); `default`
    when unset."""
    raw = e.get(name, "").strip() or default
    try:
        return parse(raw)
    except ValueError:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, not {raw!r}") from None


def _limit(e: Mapping[str, str], name: str, default: int, least: int, unit: str = "") -> int | None:
    """A limit that is a whole number of `unit`, `0` for none (None), at least `least` and
    at most `_LIMIT_BOUND`: the local executor's per-run limits and the per-user quotas."""
    text = e.get(name, "").strip()
    if not text:
        return default
    of, units = (f" of {unit}", f" {unit}") if unit else ("", "")
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(
            f"{name} must be a whole number{of} (0: no limit), not {text!r}"
        ) from None
    if value == 0:
        return None
    if not least <= value <= _LIMIT_BOUND:
        raise ConfigError(
            f"{name} must be 0 (no limit) or {least} to {_LIMIT_BOUND}{units}, not {value}"
        )
    return value


def _lease_s(text: str, cycle_s: float) -> float | None:
    if not text:
        return None
    try:
        lease_s = float(text)
    except ValueError as exc:
        raise ConfigError(f"JPUSHARE_LEASE_S must be a number of seconds: {exc}") from exc
    if math.isinf(lease_s):
        raise ConfigError(f"JPUSHARE_LEASE_S must be a finite number of seconds, not {text}")
    if not lease_s > cycle_s:  # also refuses NaN
        raise ConfigError(
            f"JPUSHARE_LEASE_S ({text}) must be longer than JPUSHARE_CYCLE_S ({cycle_s:g}): "
            "the leader renews its lease once a cycle"
        )
    return lease_s


def _backfill_partition(e: Mapping[str, str]) -> str | None:
    text = e.get("JPUSHARE_SLURM_BACKFILL_PARTITION", "").strip()
    if text.lower() == "none":
        return None
    if text and not re.fullmatch(r"[A-Za-z0-9_.-]+", text):
        raise ConfigError(f"JPUSHARE_SLURM_BACKFILL_PARTITION is not a partition name: {text!r}")
    return text or "backfill"


@dataclass(frozen=True, slots=True)
class BackfillSettings:
    """The backfill keeper's (`jpushare backfill`, `jpushare.backfill.keeper`)."""

    command: str  # with {port}, {node}, {gpus}; run with bash
    gpus_per_server: int = 1
    grace_s: float = 30.0
    port_base: int = 8100
    host: str = "127.0.0.1"  # where the servers are reached: the URLs GET /v1/backfill lists
    backoff_s: float = 10.0
    backoff_max_s: float = 600.0
    interval_s: float = 2.0
    pids_max: int | None = DEFAULT_LOCAL_PIDS_MAX


def load_backfill_settings(env: Mapping[str, str] | None = None) -> BackfillSettings:
    """JPUSHARE_BACKFILL_* (README, settings table); ConfigError names a bad one."""
    e = os.environ if env is None else env
    command = e.get("JPUSHARE_BACKFILL_COMMAND", "").strip()
    if not command:
        raise ConfigError(
            "JPUSHARE_BACKFILL_COMMAND is not set: the inference server to start on each "
            "idle GPU group, e.g. 'vllm serve MODEL --port {port}'"
        )
    try:
        command.format(port=8100, node="node", gpus="0")
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"JPUSHARE_BACKFILL_COMMAND may name only {{port}}, {{node}} and {{gpus}} "
            f"(write {{{{ and }}}} for braces): {exc!r}"
        ) from None

    number = partial(env_number, e)
    group = number("JPUSHARE_BACKFILL_GPUS_PER_SERVER", 1, 1, 64)
    port = number("JPUSHARE_BACKFILL_PORT_BASE", 8100, 1024, 65000)
    if group != int(group) or port != int(port):
        raise ConfigError(
            "JPUSHARE_BACKFILL_GPUS_PER_SERVER and JPUSHARE_BACKFILL_PORT_BASE are whole numbers"
        )
    backoff = number("JPUSHARE_BACKFILL_BACKOFF_S", 10.0, 0.0, 86400.0)
    return BackfillSettings(
        command=command,
        gpus_per_server=int(group),
        grace_s=number("JPUSHARE_BACKFILL_GRACE_S", 30.0, 0.0, 3600.0),
        port_base=int(port),
        host=e.get("JPUSHARE_BACKFILL_HOST", "").strip() or "127.0.0.1",
        backoff_s=backoff,
        backoff_max_s=max(backoff, number("JPUSHARE_BACKFILL_BACKOFF_MAX_S", 600.0, 0.0, 86400.0)),
        interval_s=number("JPUSHARE_BACKFILL_INTERVAL_S", 2.0, 0.05, 3600.0),
        pids_max=_limit(e, "JPUSHARE_LOCAL_PIDS_MAX", DEFAULT_LOCAL_PIDS_MAX, 16),
    )
