"""What route handlers receive: the app's context, a session, the authenticated user.

`create_app` puts one `ApiContext` on `app.state`; nothing here is built at import time.
Aliases, as route parameters: `SessionDep` (a session inside one transaction, committed
when the handler returns, before the response is sent, rolled back if it raises),
`CurrentUser` (a valid bearer token or MUNGE credential, else 401; see `get_current_user`),
`AdminUser` (role admin, else 403),
`ContextDep` (the executor, the clock, the busy-GPU source).

GET (and HEAD) requests are safe by HTTP's rules, and every GET route here only reads:
their session is a read-only one (`store.read_only_sessions`), which on SQLite starts a
deferred transaction instead of taking the write lock, and they wait for a read slot, not
the single write slot (see `db_slots_for`). So a long `GET /v1/queue` (a decision over the
whole queue) neither waits for nor blocks a POST or the dispatcher, and readers run side
by side. A GET route that wrote would fail on SQLite with "attempt to write a readonly
database" (the read-only sessions set `PRAGMA query_only`), in tests too, not under load.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

import anyio
from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import QueuePool

from jpushare import store
from jpushare.api.errors import ApiError, ErrorCode
from jpushare.api.estimates import StartEstimateCache, load_inputs
from jpushare.api.munge_auth import MungeSignIn, body_of_munge_request, munge_user
from jpushare.executors.base import Executor
from jpushare.metrics import ServiceMetrics
from jpushare.policy import PlacementOrder, Snapshot, decide
from jpushare.policy.peers import NamedPolicy
from jpushare.sim.estimate import StartEstimates
from jpushare.store.records import UserRecord
from jpushare.store.schema import Role
from jpushare.store.snapshot_and_decisions import QueueMemo

PlacementKey = tuple[str, str]  # (node, tier name)
BusySource = Callable[[Session], Mapping[PlacementKey, int]]


@dataclass(frozen=True, slots=True)
class ApiContext:
    """Everything the routes share; one per app."""

    sessions: sessionmaker[Session]
    read_sessions: sessionmaker[Session]  # `store.read_only_sessions(sessions)`
    executor: Executor | None
    clock: Callable[[], datetime]
    observed_busy: BusySource
    metrics: ServiceMetrics
    db_slots: DbSlots  # requests that may hold a session at once
    munge: MungeSignIn | None = None  # None: MUNGE credentials are refused (tokens only)
    only_unix_user: str | None = None  # a service that is not root serves this account only
    placement_order: PlacementOrder = PlacementOrder.PACK  # the dispatcher's (SPEC §1)
    policy: NamedPolicy = decide  # the dispatcher's (JPUSHARE_POLICY)
    # One start-estimate forecast per cycle, shared by the requests of this process.
    start_estimates: StartEstimateCache = field(default_factory=StartEstimateCache)
    queue_memo: QueueMemo = field(default_factory=QueueMemo)  # GET /v1/queue's snapshots

    def busy(self, session: Session) -> dict[PlacementKey, int]:
        """GPUs research jobs use now per placement (the dispatcher's last observation)."""
        return dict(self.observed_busy(session))

    def estimates(self, session: Session, snapshot: Snapshot) -> StartEstimates | None:
        """Start estimates for `snapshot` (one forecast per cycle: `api.estimates`)."""
        return self.start_estimates.get(snapshot, lambda: load_inputs(session))


def get_context(request: Request) -> ApiContext:
    context = request.app.state.jpushare
    assert isinstance(context, ApiContext)
    return context


async def _context(request: Request) -> ApiContext:
    # async: FastAPI would run a plain `def` dependency in the thread pool, a thread hop
    # per request for a dictionary lookup.
    return get_context(request)


ContextDep = Annotated[ApiContext, Depends(_context)]


MAX_DB_SLOTS = 10
READ_ONLY_METHODS = frozenset({"GET", "HEAD"})


@dataclass(frozen=True, slots=True)
class DbSlots:
    """How many requests may hold a session at once, for writing and for reading.

    `reads` is the same limiter as `writes` except on SQLite (see `db_slots_for`).
    """

    writes: anyio.CapacityLimiter
    reads: anyio.CapacityLimiter


def db_slots_for(sessions: sessionmaker[Session]) -> DbSlots:
    """How many requests may hold a session at once: fewer than the engine's pool holds,
    leaving room for /healthz, /metrics and a dispatcher sharing the engine.

    SQLite: one writer. Every writing transaction there takes the write lock at BEGIN
    (`BEGIN IMMEDIATE`, see `store.engine`), so a second writing session in the process
    could only wait for the lock in SQLite's busy handler, which sleeps in growing steps
    (up to 100 ms) instead of being woken: writing requests queue on the slot, in order,
    instead. Readers take no lock (WAL, deferred `BEGIN`), so they get slots of their own,
    all the pool holds less the writer's connection: they never wait for the write slot and
    a long read never holds it. Within one process, reads that are mostly Python work (the
    queue's decision) still share the GIL: side by side they are no faster than one after
    another (bench/bench_read_queue.py: 8 clients of GET /v1/queue, one worker, ~20% lower
    throughput), but a short GET no longer waits behind a long one, writes go through,
    and API workers (`--workers N`) read in parallel instead of queueing on the lock.

    Other databases: one limiter for reads and writes, as the server handles both.
    """
    bind = sessions.kw.get("bind")
    slots = _pool_slots(bind)
    if isinstance(bind, Engine) and bind.dialect.name == "sqlite":
        return DbSlots(
            writes=anyio.CapacityLimiter(1), reads=anyio.CapacityLimiter(max(1, slots - 1))
        )
    shared = anyio.CapacityLimiter(slots)
    return DbSlots(writes=shared, reads=shared)


def _pool_slots(bind: object) -> int:
    pool = getattr(bind, "pool", None)
    if isinstance(pool, QueuePool):
        return max(1, min(MAX_DB_SLOTS, pool.size() + pool._max_overflow - 3))
    return MAX_DB_SLOTS


async def get_session(request: Request, context: ContextDep) -> AsyncIterator[Session]:
    """One session in one transaction per request, committed when the handler returns;
    read-only for GET and HEAD (see the module docstring).

    The slot is awaited on the event loop, before any thread is taken: with sync handlers
    in a thread pool, requests that block threads while waiting for a pooled connection
    can starve the requests that hold the connections (and time out after 30 s). A slot
    never waits on the client: its headers and whole body have arrived, within deadlines,
    before the app runs (`service.http_server`, `api.body_limit`).
    """
    if request.method in READ_ONLY_METHODS:
        slots, sessions = context.db_slots.reads, context.read_sessions
    else:
        slots, sessions = context.db_slots.writes, context.sessions
    async with slots:
        session = sessions()
        try:
            yield session
        except BaseException:
            await _finish(session, False)
            raise
        await _finish(session, True)


async def _finish(session: Session, commit: bool) -> None:
    """End the request's session: in the thread pool if a transaction is still open (a
    handler may have committed already: then closing does no I/O and stays here)."""
    if session.in_transaction():
        await run_in_threadpool(_end, session, commit)
    else:
        session.close()


def _end(session: Session, commit: bool) -> None:
    """Commit (or roll back) and close, in one trip to the thread pool."""
    try:
        if commit:
            session.commit()
        else:
            session.rollback()
    finally:
        session.close()


# scope="function": the transaction ends (commit or rollback) when the handler returns,
# before the response goes out, so a client never sees a 201 for a job that was not stored.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]

# Declared for OpenAPI's "Authorize" button; the header itself is read below, since a
# `MUNGE` scheme is no bearer token.
_bearer = HTTPBearer(
    auto_error=False,
    description="an API token: `Authorization: Bearer jps_…` (or, from a host of the "
    "cluster, `Authorization: MUNGE <credential>`: see the API's description)",
)


def get_current_user(
    request: Request,
    munge_body: Annotated[bytes | None, Depends(body_of_munge_request)],
    _documented: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    context: ContextDep,
    session: SessionDep,
) -> UserRecord:
    """The user of the request's `Authorization`: `Bearer <token>` or `MUNGE <credential>`.

    The session comes last (FastAPI solves dependencies in this order): nothing here waits
    on the client while it holds a database slot. `api.body_limit` has read the whole body
    under a deadline before the app ran, so MUNGE's body is in memory already.
    """
    scheme, _, value = request.headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() == "munge":
        body = munge_body if munge_body is not None else b""
        return munge_user(session, context.munge, request, body, value, context.clock())
    if scheme.lower() != "bearer" or not value.strip():
        raise ApiError(
            401,
            ErrorCode.UNAUTHENTICATED,
            "missing bearer token (or MUNGE credential)",
            {"reason": "NO_CREDENTIALS"},
        )
    token = value.strip()
    if len(token) > 200:
        raise ApiError(401, ErrorCode.UNAUTHENTICATED, "invalid or revoked token")
    user = store.authenticate(session, token)
    if user is None:
        raise ApiError(401, ErrorCode.UNAUTHENTICATED, "invalid or revoked token")
    return user


CurrentUser = Annotated[UserRecord, Depends(get_current_user)]


def get_admin_user(user: CurrentUser) -> UserRecord:
    if user.role != Role.ADMIN.value:
        raise ApiError(
            403,
            ErrorCode.FORBIDDEN,
            f"{user.name} is a {user.role}: this needs role admin",
            {"role": user.role, "needs": Role.ADMIN.value},
        )
    return user


AdminUser = Annotated[UserRecord, Depends(get_admin_user)]
