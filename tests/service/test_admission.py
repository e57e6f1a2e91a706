"""Connections over the caps are refused in the listening socket's accept, on real sockets.

A flood of refused reconnects once cost a transport and an h11 protocol each and took the
event loop from normal users; now `ScreenedListener.accept` returns only the admitted ones
(counted in and handed to their protocol), answers the others 503 on the bare socket, and
yields to the loop after `REFUSALS_PER_PASS` of them.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from jpushare.service.admission import REFUSALS_PER_PASS, Admission, Refusals, ScreenedListener
from jpushare.service.http_server import ConnectionLimits, PeerCounts
from tests.raw_http import read_response


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    sock.setblocking(False)
    yield sock
    sock.close()


def client(listener: socket.socket, source: str, send: bool = True) -> socket.socket:
    sock = socket.create_connection(listener.getsockname(), timeout=30, source_address=(source, 0))
    if send:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    return sock


def answer(sock: socket.socket) -> tuple[int, dict[str, object]]:
    response = read_response(sock)
    assert response is not None, "closed without an answer"
    return response[0], response[2]


def admission(per_peer: int, most: int = 100) -> Admission:
    limits = ConnectionLimits(max_connections=most, per_peer=per_peer, header_timeout_s=10)
    return Admission(limits, PeerCounts())


def accept_all(screened: ScreenedListener) -> tuple[list[socket.socket], list[int]]:
    """Accept until none is waiting: the admitted sockets, and how many each call that
    returned none refused."""
    admitted: list[socket.socket] = []
    passes: list[int] = []
    while True:
        before = screened.admission.refusals.refused
        try:
            admitted.append(screened.accept()[0])
        except BlockingIOError:
            refused = screened.admission.refusals.refused - before
            if refused == 0:
                return admitted, passes
            passes.append(refused)


def test_accept_returns_the_admitted_and_answers_the_others_503(
    listener: socket.socket,
) -> None:
    async def run() -> None:
        guard = admission(per_peer=2)
        screened = ScreenedListener(listener, guard)
        clients = [client(listener, "127.0.0.2") for _ in range(3)]
        silent = client(listener, "127.0.0.2", send=False)  # its request not sent yet
        other = client(listener, "127.0.0.3")
        admitted, _ = accept_all(screened)
        try:
            assert len(admitted) == 3  # two of .2, and .3
            assert guard.peers.by_peer == {"127.0.0.2": 2, "127.0.0.3": 1}
            # Each admitted one is handed to its protocol, which claims it once.
            assert guard.peers.claim("127.0.0.3") and not guard.peers.claim("127.0.0.3")
            status, body = answer(clients[2])
            assert status == 503
            assert body["error"]["code"] == "TOO_MANY_CONNECTIONS"  # type: ignore[index]
            # Its request read, it was closed at once; the silent one is half-closed and
            # kept, so that the request it sends next meets no closed socket (a reset).
            assert len(guard.refusals.lingering) == 1
            silent.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert answer(silent)[0] == 503
            other.settimeout(0.2)
            with pytest.raises(TimeoutError):
                other.recv(1)  # admitted: no answer from the accept
        finally:
            for sock in [*admitted, *clients, silent, other]:
                sock.close()
            guard.refusals.close_all()

    asyncio.run(run())


def test_a_flood_is_refused_a_pass_at_a_time_and_closed_past_the_lingering_budget(
    listener: socket.socket,
) -> None:
    guard = admission(per_peer=1)
    guard.refusals = Refusals(max_lingering=0)  # each closed at once: no loop needed
    screened = ScreenedListener(listener, guard)
    count = REFUSALS_PER_PASS + 10
    clients = [client(listener, "127.0.0.4") for _ in range(count + 1)]
    try:
        admitted, passes = accept_all(screened)
        assert len(admitted) == 1 and guard.peers.total == 1
        assert guard.refusals.refused == count
        assert passes == [REFUSALS_PER_PASS, 10]  # the loop got its turn in between
        refused = [answer(sock)[0] for sock in clients[1:]]
        assert refused == [503] * count
    finally:
        for sock in clients:
            sock.close()
