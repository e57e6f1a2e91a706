"""Connections over the caps refused in the listening socket's accept, before asyncio builds
anything for them.

asyncio turns each accepted connection into a task, a transport, a future and uvicorn's
protocol (an h11 connection, timers, a scope), and closing it again takes as many steps:
some 0.3 ms of the one CPU the event loop has. A flood of refused reconnects (thousands a
second from clients that retry as soon as they are dropped) spent the loop's whole time on
that, and normal users' requests and connects waited behind it (the listen backlog full,
their SYNs dropped). So `GuardedLoop` (the event loop `GuardedConfig` makes) hands
asyncio's accept loop a `ScreenedListener` instead of the listening socket: its `accept()`
counts each connection in (`PeerCounts.admit`) and returns only the admitted ones;
one over a cap is refused there, on the bare descriptor (`Refusals.refuse`): what the
client has sent so far is read, the 503 sent, and the socket closed, in one pass and a
handful of system calls. After `REFUSALS_PER_PASS` refusals it says "nothing more to
accept" so that the loop serves its other sockets before the next ones; the listening
socket stays readable, so the rest come on the next pass.

The read before the close matters: closing a socket with unread data, or one to which the
client then sends its request, resets the connection, and the client loses the answer
(nearly every refusal of a flood whose clients are slow to write, when tried). So the
listening socket has TCP_DEFER_ACCEPT: the kernel hands a connection to accept once its
client's first bytes are in (or after `DEFER_ACCEPT_S`, for one that sends nothing), and a
refusal that read something closes at once, cleanly. One that read nothing is half-closed
and kept for `LINGER_S`, unread, so that its client reads the 503 first, as long as few
are (`ConnectionLimits.max_lingering`, each a descriptor of the reserve); beyond that they
are closed at once.

`_accept_connection` is asyncio's (private, the same from 3.8 to 3.13) method that the
listening socket's reader calls; the override only swaps the socket it is given.
"""

from __future__ import annotations

import asyncio
import collections
import json
import socket
import time
from typing import TYPE_CHECKING, Any

from jpushare.api.errors import ErrorCode

if TYPE_CHECKING:
    from jpushare.service.http_server import ConnectionLimits, PeerCounts

REFUSALS_PER_PASS = 64  # refused in one pass of the loop before it serves anything else
RETRY_AFTER_S = 5
LINGER_S = 2.0  # how long a refused connection is kept to let its client read the 503
DEFER_ACCEPT_S = 1  # TCP_DEFER_ACCEPT: a connect is accepted once data arrives, or after this


class Admission:
    """What the listening socket needs to admit or refuse: the caps and this process's
    counts (`service.http_server`), and the refused connections still lingering."""

    def __init__(self, limits: ConnectionLimits, peers: PeerCounts) -> None:
        self.limits = limits
        self.peers = peers
        self.refusals = Refusals(limits.max_lingering)


def error_bytes(
    status: int, reason: str, code: ErrorCode, message: str, details: dict[str, Any]
) -> bytes:
    """A whole HTTP/1.1 error response that closes the connection."""
    body = json.dumps({"error": {"code": code.value, "message": message, "details": details}})
    data = body.encode()
    retry = f"retry-after: {RETRY_AFTER_S}\r\n" if status == 503 else ""
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\n{retry}connection: close\r\n\r\n"
    )
    return head.encode() + data


def refusal_bytes(why: str) -> bytes:
    """The whole 503 TOO_MANY_CONNECTIONS response, in the API's error shape."""
    return error_bytes(
        503,
        "Service Unavailable",
        ErrorCode.TOO_MANY_CONNECTIONS,
        f"{why}; close one, or try again in {RETRY_AFTER_S} s",
        {"retry_after_s": RETRY_AFTER_S},
    )


class Refusals:
    """Answers refused connections on their bare sockets, and closes the lingering ones."""

    def __init__(self, max_lingering: int) -> None:
        self.max_lingering = max_lingering
        self.lingering: collections.deque[tuple[float, socket.socket]] = collections.deque()
        self.sweep: asyncio.TimerHandle | None = None
        self.refused = 0  # in all, for tests and logs

    def refuse(self, conn: socket.socket, why: str) -> None:
        self.refused += 1
        try:
            sent_first = bool(conn.recv(65536, socket.MSG_DONTWAIT))
        except BlockingIOError:
            sent_first = False  # its request is on its way: it would meet a closed socket
        except OSError:
            conn.close()  # reset already
            return
        try:
            conn.send(refusal_bytes(why), socket.MSG_DONTWAIT)  # a new socket's buffer is empty
            if sent_first or len(self.lingering) >= self.max_lingering:
                conn.close()  # nothing unread: a clean close, the answer is read
                return
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            conn.close()
            return
        self.lingering.append((time.monotonic() + LINGER_S, conn))
        if self.sweep is None:
            self.sweep = asyncio.get_running_loop().call_later(LINGER_S, self._sweep)

    def _sweep(self) -> None:
        self.sweep = None
        now = time.monotonic()
        while self.lingering and self.lingering[0][0] <= now:
            self.lingering.popleft()[1].close()
        if self.lingering:
            wait = self.lingering[0][0] - now
            self.sweep = asyncio.get_running_loop().call_later(wait, self._sweep)

    def close_all(self) -> None:
        if self.sweep is not None:
            self.sweep.cancel()
            self.sweep = None
        while self.lingering:
            self.lingering.popleft()[1].close()


class ScreenedListener:
    """The listening socket as asyncio's accept loop sees it: `accept()` returns only the
    connections the caps admit (counted in, and handed to the protocol: `PeerCounts.handed`)."""

    def __init__(self, sock: socket.socket, admission: Admission) -> None:
        self.sock = sock
        self.admission = admission

    def accept(self) -> tuple[socket.socket, Any]:
        refused = 0
        peers, limits = self.admission.peers, self.admission.limits
        while True:
            conn, addr = self.sock.accept()  # BlockingIOError when none is waiting
            peer = str(addr[0]) if isinstance(addr, tuple) and addr else ""
            why = peers.admit(peer, limits)
            if why is None:
                peers.hand(peer)
                return conn, addr
            self.admission.refusals.refuse(conn, why)
            refused += 1
            if refused >= REFUSALS_PER_PASS:
                raise BlockingIOError  # serve the loop's other sockets, then the rest

    def fileno(self) -> int:
        return self.sock.fileno()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


class GuardedLoop(asyncio.SelectorEventLoop):
    """asyncio's event loop, accepting through `ScreenedListener`."""

    def __init__(self, admission: Admission) -> None:
        super().__init__()
        self.admission = admission

    def _accept_connection(
        self, protocol_factory: Any, sock: Any, *args: Any, **kwargs: Any
    ) -> None:
        if not isinstance(sock, ScreenedListener):
            sock = ScreenedListener(sock, self.admission)
        super()._accept_connection(protocol_factory, sock, *args, **kwargs)  # type: ignore[misc]

    async def create_server(self, *args: Any, **kwargs: Any) -> asyncio.Server:
        server = await super().create_server(*args, **kwargs)
        for sock in server.sockets:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                # Handed to accept only once the client's first bytes are in, so that a
                # refusal reads them and closes cleanly (see the module's docstring).
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, DEFER_ACCEPT_S)
        return server

    def close(self) -> None:
        self.admission.refusals.close_all()
        super().close()
