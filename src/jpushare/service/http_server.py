"""The API's HTTP server: uvicorn's h11 protocol with deadlines and connection caps.

A client must not be able to hold what the service needs: a file descriptor, a database
slot, the dispatcher's cycle. uvicorn alone bounds none of it: a connection that sends
nothing, or one header line now and then, stays open for ever (its keep-alive timer
is cancelled by any byte, and none runs before the first request), and 20,000 of them
from one host used up the process's descriptors: `/healthz` timed out, the dispatcher
could not open its files, and asyncio logged a traceback per failed accept. So:

- `GuardedH11Protocol` (uvicorn's `H11Protocol`, given as `Config(http=...)`): the
  request's headers must arrive whole within `header_timeout_s` of the connection's start
  or of the previous response, else 408 REQUEST_TIMEOUT and the connection is closed (a
  finished response still gets uvicorn's keep-alive close after `KEEPALIVE_S` of silence).
  The body has its own deadline in the app's first middleware (`api.body_limit`).
- Caps on open connections, per process and per client address (`PeerCounts`): a
  connection over either is answered 503 TOO_MANY_CONNECTIONS with `Retry-After` and
  closed in the listening socket's accept, before asyncio makes a transport or uvicorn a
  protocol for it (`service.admission`: a refusal is a few system calls, so a flood of
  reconnects does not take the event loop from normal users). It never reaches the app, so
  it costs no database slot, and it holds no descriptor after its refusal (but the few
  kept briefly so that their clients read the answer).
- `limits_for`: the caps' defaults come from the descriptor limit, which `raise_fd_limit`
  first lifts to the hard limit, less `reserved_fds` kept for the dispatcher, the database
  and the executor, and for refused connections that linger (an eighth of it). The listen
  backlog is long (`BACKLOG`): what waits there holds no descriptor of the process, and a
  short one, full under a flood, dropped normal clients' connects.
- Accept errors (EMFILE, ENFILE, ENOBUFS, ENOMEM: asyncio's "socket.accept() out of system
  resource", once per retry, with a traceback) are logged once per `ACCEPT_LOG_INTERVAL_S`
  with a count (`AcceptErrorLog`, the event loop's exception handler).

`GuardedConfig` carries the limits and the counters; it is pickled to each of `--workers
N`'s processes, each of which then counts its own connections (a cap is per process).
Error bodies here are written as bytes, bypassing h11 (which has no request to answer
yet), in the API's `{"error": {code, message, details}}` shape.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from jpushare.api.errors import ErrorCode
from jpushare.config import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_PEER,
    ConfigError,
    ConnectionSettings,
)
from jpushare.service.admission import Admission, GuardedLoop, error_bytes, refusal_bytes

log = logging.getLogger(__name__)

KEEPALIVE_S = 5  # silence after a response before an idle connection is closed (uvicorn's)
BACKLOG = 2048  # the listen backlog (the kernel caps it at net.core.somaxconn)
ACCEPT_LOG_INTERVAL_S = 60.0
ACCEPT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
MIN_CONNECTIONS = 16  # fewer than this left by the fd limit: refuse to start


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """What one API process lets clients hold (see `limits_for`)."""

    max_connections: int
    per_peer: int
    header_timeout_s: float
    fd_limit: int = 0  # what they were derived from, for the start line
    reserved_fds: int = 256

    @property
    def backlog(self) -> int:
        """The listen backlog. A connection over a cap is refused in the accept itself
        (`service.admission`) and holds no descriptor after it, and the admitted ones
        asyncio takes in one pass are within the caps; so the queue can be long enough
        that a normal client's connect is not dropped while a flood is being refused."""
        return BACKLOG

    @property
    def max_lingering(self) -> int:
        """Refused connections kept open at once to let their clients read the 503 (each
        holds a descriptor of the reserve); more are closed at once."""
        return max(4, self.reserved_fds // 8)

    def describe(self) -> str:
        return (
            f"at most {self.max_connections} connections, {self.per_peer} per client "
            f"address; headers within {self.header_timeout_s:g} s (fd limit {self.fd_limit}, "
            f"{self.reserved_fds} kept for the dispatcher, database and executor)"
        )


def raise_fd_limit() -> int:
    """Lift the soft descriptor limit to the hard one (where it can be); the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else _nr_open()
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the descriptor limit from %d to %d: %s", soft, target, exc)
    return soft


def _nr_open() -> int:
    try:
        return int(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        return 65536


def limits_for(settings: ConnectionSettings, fd_limit: int) -> ConnectionLimits:
    """The caps: the settings', else derived from the fd budget (fd limit less reserve)."""
    budget = fd_limit - settings.reserved_fds
    if budget < MIN_CONNECTIONS:
        raise ConfigError(
            f"the descriptor limit ({fd_limit}) leaves {budget} for connections after "
            f"JPUSHARE_RESERVED_FDS ({settings.reserved_fds}); raise `ulimit -n` (LimitNOFILE= "
            "in a systemd unit) or lower JPUSHARE_RESERVED_FDS"
        )
    most = settings.max_connections or min(DEFAULT_MAX_CONNECTIONS, budget)
    if most > budget:
        log.warning(
            "JPUSHARE_MAX_CONNECTIONS=%d is above the %d descriptors the limit leaves for "
            "connections: the dispatcher and the database may run out of descriptors",
            most,
            budget,
        )
    per_peer = settings.max_connections_per_peer or min(
        DEFAULT_MAX_CONNECTIONS_PER_PEER, max(1, most // 4)
    )
    return ConnectionLimits(
        max_connections=most,
        per_peer=min(per_peer, most),
        header_timeout_s=settings.header_timeout_s,
        fd_limit=fd_limit,
        reserved_fds=settings.reserved_fds,
    )


@dataclass
class PeerCounts:
    """Open connections of one process, in all and per client address."""

    total: int = 0
    by_peer: dict[str, int] = field(default_factory=dict)
    handed: dict[str, int] = field(default_factory=dict)  # admitted, protocol not made yet

    def admit(self, peer: str, limits: ConnectionLimits) -> str | None:
        """Count a new connection in; or why not (and it is not counted)."""
        held = self.by_peer.get(peer, 0)
        if held >= limits.per_peer:
            return f"this client address holds {held} connections, the most this service allows"
        if self.total >= limits.max_connections:
            return f"this service holds {self.total} connections, the most it allows"
        self.total += 1
        self.by_peer[peer] = held + 1
        return None

    def hand(self, peer: str) -> None:
        """An admitted connection (counted in) is on its way to its protocol."""
        self.handed[peer] = self.handed.get(peer, 0) + 1

    def claim(self, peer: str) -> bool:
        """A protocol takes over a connection `hand` passed on (True), or there is none."""
        waiting = self.handed.get(peer, 0)
        if waiting == 0:
            return False
        if waiting > 1:
            self.handed[peer] = waiting - 1
        else:
            del self.handed[peer]
        return True

    def release(self, peer: str) -> None:
        self.total -= 1
        left = self.by_peer.get(peer, 1) - 1
        if left > 0:
            self.by_peer[peer] = left
        else:
            self.by_peer.pop(peer, None)


class GuardedConfig(uvicorn.Config):
    """uvicorn's Config with `GuardedH11Protocol`, the limits and this process's counts."""

    def __init__(self, app: Any, *, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(
            app,
            http=GuardedH11Protocol,
            timeout_keep_alive=KEEPALIVE_S,
            backlog=limits.backlog,
            **kwargs,
        )
        self.limits = limits
        self.peers = PeerCounts()

    def get_loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop] | None:
        def new_loop() -> asyncio.AbstractEventLoop:
            # asyncio's own loop (not uvloop): the connections over a cap are refused in
            # its accept (`service.admission`).
            loop = GuardedLoop(Admission(self.limits, self.peers))
            loop.set_exception_handler(AcceptErrorLog())
            return loop

        return new_loop


class AcceptErrorLog:
    """The event loop's exception handler: accept errors once per interval, with a count;
    anything else as asyncio logs it."""

    def __init__(self, interval_s: float = ACCEPT_LOG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.last_logged: float | None = None
        self.unlogged = 0
        self.flush: asyncio.TimerHandle | None = None

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        accepting = str(context.get("message", "")).startswith("socket.accept()")
        if not (accepting and isinstance(exc, OSError) and exc.errno in ACCEPT_ERRNOS):
            loop.default_exception_handler(context)
            return
        now = time.monotonic()
        if self.last_logged is None or now - self.last_logged >= self.interval_s:
            self._log(now, exc)
            return
        self.unlogged += 1
        if self.flush is None:
            wait = self.last_logged + self.interval_s - now
            self.flush = loop.call_later(wait, self._log, None, exc)

    def _log(self, now: float | None, exc: OSError) -> None:
        if self.flush is not None:
            self.flush.cancel()
            self.flush = None
        more = self.unlogged
        self.unlogged = 0
        if now is None and more == 0:
            return
        self.last_logged = time.monotonic() if now is None else now
        log.error(
            "cannot accept connections: %s%s; new connections wait in the backlog (check "
            "JPUSHARE_MAX_CONNECTIONS and the descriptor limit)",
            exc.strerror or exc,
            f" ({more} more times in the last {self.interval_s:g} s)" if more else "",
        )


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the header deadline and the connection caps."""

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        assert isinstance(config, GuardedConfig)
        self.limits = config.limits
        self.peers = config.peers
        self.peer: str | None = None  # set while counted in `peers`
        self.refused = False
        self.deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        peername = transport.get_extra_info("peername")
        peer = str(peername[0]) if isinstance(peername, tuple) and peername else ""
        # Admitted and counted in the accept (`service.admission`); else counted here.
        refusal = None if self.peers.claim(peer) else self.peers.admit(peer, self.limits)
        if refusal is not None:
            self.refused = True  # before uvicorn knows of it
            self.transport = transport
            transport.write(refusal_bytes(refusal))
            transport.close()
            return
        self.peer = peer
        super().connection_made(transport)
        self._arm_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_deadline()
        if self.peer is not None:
            self.peers.release(self.peer)
            self.peer = None
        if not self.refused:
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # read and dropped: the answer is sent
        super().data_received(data)

    def eof_received(self) -> None:
        if self.refused:
            self.transport.close()

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a request's headers arrived whole
            self._disarm_deadline()

    def on_response_complete(self) -> None:
        cycle = self.cycle
        super().on_response_complete()
        if self.cycle is cycle and not self.transport.is_closing():
            self._arm_deadline()  # the next request's headers are due

    def _arm_deadline(self) -> None:
        self._disarm_deadline()
        self.deadline = self.loop.call_later(self.limits.header_timeout_s, self._too_slow)

    def _disarm_deadline(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _too_slow(self) -> None:
        self.deadline = None
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE:
            timeout = self.limits.header_timeout_s
            self.transport.write(
                error_bytes(
                    408,
                    "Request Timeout",
                    ErrorCode.REQUEST_TIMEOUT,
                    f"the request's headers did not arrive whole within {timeout:g} s",
                    {"timeout_s": timeout},
                )
            )
        self.transport.close()
