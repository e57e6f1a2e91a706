"""What route handlers receive: the app's context, a session, the authenticated user.

`create_app` puts one `ApiContext` on `app.state`; nothing here is built at import time.
Aliases, as route parameters: `SessionDep` (a session inside one transaction, committed
when the handler returns, before the response is sent, rolled back if it raises),
`CurrentUser` (any valid bearer token, else 401), `AdminUser` (role admin, else 403),
`ContextDep` (the executor, the clock, the busy-GPU source).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.api.errors import ApiError, ErrorCode
from jpushare.executors.base import Executor
from jpushare.metrics import ServiceMetrics
from jpushare.store.records import UserRecord
from jpushare.store.schema import Role

PlacementKey = tuple[str, str]  # (node, tier name)
BusySource = Callable[[Session], Mapping[PlacementKey, int]]


@dataclass(frozen=True, slots=True)
class ApiContext:
    """Everything the routes share; one per app."""

    sessions: sessionmaker[Session]
    executor: Executor | None
    clock: Callable[[], datetime]
    observed_busy: BusySource
    metrics: ServiceMetrics

    def busy(self, session: Session) -> dict[PlacementKey, int]:
        """GPUs research jobs use now per placement (the dispatcher's last observation)."""
        return dict(self.observed_busy(session))


def get_context(request: Request) -> ApiContext:
    context = request.app.state.jpushare
    assert isinstance(context, ApiContext)
    return context


ContextDep = Annotated[ApiContext, Depends(get_context)]


def get_session(context: ContextDep) -> Iterator[Session]:
    with context.sessions.begin() as session:
        yield session


# scope="function": the transaction ends (commit or rollback) when the handler returns,
# before the response goes out, so a client never sees a 201 for a job that was not stored.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]

_bearer = HTTPBearer(auto_error=False, description="an API token: `Authorization: Bearer jps_…`")


def get_current_user(
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> UserRecord:
    if credentials is None:
        raise ApiError(401, ErrorCode.UNAUTHENTICATED, "missing bearer token")
    token = credentials.credentials.strip()
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
