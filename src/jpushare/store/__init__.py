"""The store: the only code that touches the database (SQLAlchemy 2, Alembic migrations).

Layout:
- `engine`: the database URL (`JPUSHARE_DATABASE_URL`, else a SQLite file), engines,
  sessions, and read-only sessions (no write lock on SQLite);
- `migrate`: `upgrade(url)` / `downgrade(url)`; the schema is created by migrations only;
- `schema`: the ORM tables; `records`: the frozen values the repository returns;
- `inventory`: tiers, nodes, GPUs, placements; `accounts`: labs, users, API tokens;
- `reservations`: the reservations held now and the history of ended ones; `counts`: figures
  over many rows (jobs by state, labs' in-flight bills, requeues) for /metrics and the API;
- `jobs`: read, list, history; `submissions`: submit (SPEC §2 fit check), with the
  per-user limits of `quotas`;
- `lifecycle`: confirm, start, end (charging the lab), OOM / node-failure requeue, refusal,
  cancel; `cycle`: `load_snapshot` and `record_decisions` for the dispatcher, with each
  kind of policy action's part of the latter in `actions`;
- `transitions`: the guarded UPDATE, job events and lab charging every transition uses.

Repository functions take a `Session` and never commit: the caller owns the transaction
(`with sessionmaker.begin() as session: ...`), so several calls can be one transaction.
They return frozen records, never ORM objects. Times are aware UTC datetimes; the policy's
float UNIX seconds are converted here, at the boundary (`times`).
"""

from jpushare.store.accounts import (
    authenticate,
    create_lab,
    create_user,
    get_lab,
    get_user,
    get_user_by_id,
    hash_token,
    issue_token,
    list_labs,
    list_tokens,
    list_users,
    revoke_token,
    set_unix_user,
    unix_accounts,
    unix_user_of,
    users_of_unix_account,
)
from jpushare.store.engine import (
    database_url,
    make_engine,
    make_sessionmaker,
    read_only_sessions,
    sqlite_url,
)
from jpushare.store.errors import (
    AlreadyExists,
    ConcurrentUpdate,
    InvalidRequest,
    InvalidTransition,
    NoFitPlacement,
    NotFound,
    StoreError,
)
from jpushare.store.inventory import (
    drain_node,
    get_tier,
    list_nodes,
    list_tiers,
    observed_busy,
    placements,
    policy_tiers,
    remove_node,
    set_gpu_schedulable,
    set_node_gpus,
    set_node_state,
    sync_inventory,
    undrain_node,
    upsert_tier,
    upsert_tiers,
)
from jpushare.store.jobs import (
    JobFilter,
    get_job,
    get_jobs,
    job_count,
    job_history,
    list_jobs,
    parse_job_id,
)
from jpushare.store.lifecycle import (
    cancel_job,
    confirm_dispatch,
    confirm_dispatches,
    end_job,
    fail_dispatch,
    mark_running,
    requeue_after_node_failure,
    requeue_after_oom,
    settle_cancelled_run,
)
from jpushare.store.migrate import upgrade
from jpushare.store.records import (
    AttemptEnded,
    Cancelled,
    DispatchedJob,
    IssuedToken,
    JobEventRecord,
    JobRecord,
    LabRecord,
    NodeRecord,
    Recorded,
    SyncReport,
    TierRecord,
    TokenRecord,
    UserRecord,
)
from jpushare.store.schema import EventKind, JobState, Role
from jpushare.store.snapshot_and_decisions import held_by_jobs, load_snapshot, record_decisions
from jpushare.store.submissions import Eligibility, Submission, submit
from jpushare.store.times import from_epoch, to_epoch, utc_now
from jpushare.store.waiting_jobs import (
    Refreshed,
    hold_job,
    refresh_waiting,
    release_job,
    update_job,
    waiting_verdict,
)
from jpushare.vocabulary import job_id as policy_job_id  # the id the policy knows a job by

__all__ = [
    "AlreadyExists",
    "AttemptEnded",
    "Cancelled",
    "ConcurrentUpdate",
    "DispatchedJob",
    "Eligibility",
    "EventKind",
    "InvalidRequest",
    "InvalidTransition",
    "IssuedToken",
    "JobEventRecord",
    "JobFilter",
    "JobRecord",
    "JobState",
    "LabRecord",
    "NoFitPlacement",
    "NodeRecord",
    "NotFound",
    "Recorded",
    "Refreshed",
    "Role",
    "StoreError",
    "Submission",
    "SyncReport",
    "TierRecord",
    "TokenRecord",
    "UserRecord",
    "authenticate",
    "cancel_job",
    "confirm_dispatch",
    "confirm_dispatches",
    "create_lab",
    "create_user",
    "database_url",
    "drain_node",
    "end_job",
    "fail_dispatch",
    "from_epoch",
    "get_job",
    "get_jobs",
    "get_lab",
    "get_tier",
    "get_user",
    "get_user_by_id",
    "hash_token",
    "held_by_jobs",
    "hold_job",
    "issue_token",
    "job_count",
    "job_history",
    "list_jobs",
    "list_labs",
    "list_nodes",
    "list_tiers",
    "list_tokens",
    "list_users",
    "load_snapshot",
    "make_engine",
    "make_sessionmaker",
    "mark_running",
    "observed_busy",
    "parse_job_id",
    "placements",
    "policy_job_id",
    "policy_tiers",
    "read_only_sessions",
    "record_decisions",
    "refresh_waiting",
    "release_job",
    "remove_node",
    "requeue_after_node_failure",
    "requeue_after_oom",
    "revoke_token",
    "set_gpu_schedulable",
    "set_node_gpus",
    "set_node_state",
    "set_unix_user",
    "settle_cancelled_run",
    "sqlite_url",
    "submit",
    "sync_inventory",
    "to_epoch",
    "undrain_node",
    "unix_accounts",
    "unix_user_of",
    "update_job",
    "upgrade",
    "upsert_tier",
    "upsert_tiers",
    "users_of_unix_account",
    "utc_now",
    "waiting_verdict",
]
