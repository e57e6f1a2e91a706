"""Clients that try to stall the service, replayed on a real `serve --demo` with real sockets.

- Slow bodies, with a bearer token, a garbage MUNGE credential or none: each once held a
  database slot (MUNGE's body was read inside the session), so ten of them stopped every
  write and read. Now each gets 408 REQUEST_TIMEOUT when its body is late, and a normal
  user's requests go through meanwhile (on SQLite and PostgreSQL).
- Slow headers (nothing sent, or one header line now and then): each stayed open for ever;
  now 408 and closed.
- Idle connections over the per-address cap: 503 TOO_MANY_CONNECTIONS, while another
  address and a normal user still get through.
- A process out of descriptors: the dispatcher kept failing its cycles and asyncio logged
  a traceback per failed accept; now connections beyond the budget are closed, the
  dispatcher keeps cycling, and accept errors are one line per interval.

No timed assertions: the deadlines are long (`SLOW_S`), and a normal request only has to
finish before them to show it did not wait for the stalled clients.
"""

from __future__ import annotations

import json
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from jpushare import store
from jpushare.store.health import load_health
from tests.dispatcher.conftest import wait_for
from tests.raw_http import Response, read_response, readable_now
from tests.service.demo_service import DemoService, demo_service, demo_service_with

SLOW_S = 20  # the header and body deadlines of the service under attack
CLIENT_S = 15.0  # a normal request that takes longer waited for the stalled ones
JOB = {"name": "normal", "command": "true", "num_gpus": 1, "workdir": "/tmp"}


def connect(url: str, source: str = "127.0.0.1", timeout_s: float = 60) -> socket.socket:
    where = urlsplit(url)
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(timeout_s)
    sock.connect((where.hostname, where.port))
    sock.settimeout(60)
    return sock


def idle(url: str, source: str) -> socket.socket:
    """A connection that sent half a request line (one that sends nothing at all is
    handed to the service only after a second: TCP_DEFER_ACCEPT)."""
    sock = connect(url, source)
    sock.sendall(b"GET /v1/queue HTTP/1.1\r\n")
    return sock


def is_closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def served_and_closed(url: str, source: str, request: bytes) -> Response:
    """The answer to one `Connection: close` request, read to the server's close."""
    sock = connect(url, source)
    try:
        sock.sendall(request)
        response = read_response(sock)
        assert response is not None, "closed without an answer"
        assert is_closed(sock), "the server kept the connection open"
        return response
    finally:
        sock.close()


def stalled_post(url: str, authorization: str | None, path: str = "/v1/jobs") -> socket.socket:
    """A POST that declares 100 bytes of body and sends 10."""
    sock = connect(url)
    auth = f"Authorization: {authorization}\r\n" if authorization else ""
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{auth}"
        'Content-Length: 100\r\n\r\n{"name": "'.encode()
    )
    return sock


def assert_408(response: tuple[int, dict[str, str], dict[str, Any]] | None, what: str) -> None:
    assert response is not None, f"{what}: closed without an answer"
    status, headers, body = response
    assert status == 408, (what, body)
    assert headers["connection"] == "close"
    assert body["error"]["code"] == "REQUEST_TIMEOUT"
    assert body["error"]["details"] == {"timeout_s": SLOW_S}


@pytest.fixture
def attacked(tmp_path: Path, empty_db_url: str) -> Iterator[DemoService]:
    with demo_service(
        tmp_path,
        "hostile",
        JPUSHARE_DATABASE_URL=empty_db_url,
        JPUSHARE_CYCLE_S="0.3",
        JPUSHARE_BODY_TIMEOUT_S=str(SLOW_S),
        JPUSHARE_HEADER_TIMEOUT_S=str(SLOW_S),
    ) as demo:
        yield demo


def test_slow_bodies_and_headers_get_408_while_a_normal_user_goes_on(
    attacked: DemoService,
) -> None:
    url, token = attacked.url, attacked.tokens["JPUSHARE_TOKEN"]
    stalled = {
        "bearer": [stalled_post(url, f"Bearer {token}") for _ in range(4)],
        # a route that takes no body: MUNGE's dependency read it inside a session
        "munge": [
            stalled_post(url, "MUNGE MUNGE:garbage-credential:", "/v1/jobs/1/cancel")
            for _ in range(3)
        ],
        "anonymous": [stalled_post(url, None, "/v1/jobs/1/cancel") for _ in range(3)],
    }
    silent = connect(url)  # connects and sends nothing
    dribbling = connect(url)  # a header line now and then, never the end of the headers
    dribbling.sendall(b"GET /v1/queue HTTP/1.1\r\nHost: x\r\n")
    started = time.monotonic()

    # A normal user's write and reads go through while all of them are held.
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=CLIENT_S
    ) as client:
        created = client.post("/v1/jobs", json=JOB)
        assert created.status_code == 201, created.text
        assert client.get("/v1/queue").status_code == 200
        assert client.get(f"/v1/jobs/{created.json()['id']}").status_code == 200
        assert httpx.get(f"{url}/healthz", timeout=CLIENT_S).status_code == 200
    assert time.monotonic() - started < SLOW_S, "too slow a machine to tell (not a failure)"

    for kind, socks in stalled.items():
        for sock in socks:
            assert_408(read_response(sock), kind)
            assert is_closed(sock), kind
            sock.close()
    # Headers: 408 and closed, however they trickle in.
    dribbling.settimeout(1)
    answer = b""
    while not answer:
        try:
            answer = dribbling.recv(65536, socket.MSG_PEEK)
        except TimeoutError:
            dribbling.sendall(b"X-Still-There: yes\r\n")
        except ConnectionResetError:
            break
        assert time.monotonic() - started < 3 * SLOW_S, "the dribbling client is still served"
    dribbling.settimeout(60)
    for what, sock in (("silent", silent), ("dribbling", dribbling)):
        assert_408(read_response(sock), what)
        assert is_closed(sock), what
        sock.close()


def test_connections_over_the_per_address_cap_get_503_and_others_get_through(
    tmp_path: Path,
) -> None:
    per_peer, most = 20, 45
    with demo_service(
        tmp_path,
        "capped",
        JPUSHARE_CYCLE_S="0.3",
        JPUSHARE_HEADER_TIMEOUT_S="120",
        JPUSHARE_MAX_CONNECTIONS_PER_PEER=str(per_peer),
        JPUSHARE_MAX_CONNECTIONS=str(most),
    ) as demo:
        url, token = demo.url, demo.tokens["JPUSHARE_TOKEN"]
        held = [idle(url, "127.0.0.2") for _ in range(per_peer)]
        # The next from that address is refused, however it asks.
        over = connect(url, "127.0.0.2")
        over.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        response = read_response(over)
        assert response is not None
        status, headers, body = response
        assert status == 503, body
        assert body["error"]["code"] == "TOO_MANY_CONNECTIONS"
        assert headers["retry-after"] == "5" and headers["connection"] == "close"
        assert is_closed(over)
        over.close()

        # Another address, and a normal user's write, still get through. Each asks with
        # `Connection: close` and reads to the server's close: the server closes its socket
        # only after the connection's place is given back, so the count below is exact.
        health = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        assert served_and_closed(url, "127.0.0.3", health)[0] == 200
        job = json.dumps(JOB).encode()
        write = (
            f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(job)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode() + job
        assert served_and_closed(url, "127.0.0.1", write)[0] == 201

        # The process's cap: 20 + 20 + 5 held, the 46th is refused wherever it comes from.
        held += [idle(url, "127.0.0.3") for _ in range(per_peer)]
        held += [idle(url, "127.0.0.4") for _ in range(most - 2 * per_peer)]
        late = connect(url, "127.0.0.5")
        late.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        response = read_response(late)
        assert response is not None and response[0] == 503, response
        late.close()

        # Closed connections give their places back.
        for sock in held:
            sock.close()

        def served() -> bool:
            with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2")) as c:
                return c.get(f"{url}/healthz", timeout=CLIENT_S).status_code == 200

        wait_for(served, "the cap's places are given back")


def limit_fds(count: int) -> None:
    """In the service's process: soft and hard descriptor limits of `count`."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))


def cycles_ok(tmp_path: Path) -> int:
    engine = store.make_engine(f"sqlite:///{tmp_path / 'var' / 'jpushare.sqlite'}")
    try:
        with store.make_sessionmaker(engine)() as session:
            return load_health(session).cycles_ok
    finally:
        engine.dispose()


def flood(url: str, count: int) -> list[socket.socket]:
    """`count` idle connections from 127.0.0.10 on (100 per address), as many as connect."""
    out = []
    for i in range(count):
        try:
            sock = connect(url, f"127.0.0.{10 + i // 100}", timeout_s=2)
            sock.sendall(b"GET /v1/queue HTTP/1.1\r\n")  # half-sent
        except OSError:  # the backlog is full: the server does not accept now
            break
        out.append(sock)
    return out


FDS = 400  # the service's descriptor limit in the two tests below
FLOOD = 1000


def test_the_dispatcher_keeps_cycling_while_clients_exhaust_the_connections(
    tmp_path: Path,
) -> None:
    with demo_service_with(
        lambda: limit_fds(FDS),
        tmp_path,
        "exhausted",
        cycled=True,
        JPUSHARE_CYCLE_S="0.2",
        JPUSHARE_HEADER_TIMEOUT_S="120",
    ) as demo:
        socks = flood(demo.url, FLOOD)
        try:
            before = cycles_ok(tmp_path)
            wait_for(lambda: cycles_ok(tmp_path) >= before + 5, "five more cycles done")
            assert "Too many open files" not in demo.service.log()
            # The connections over the budget were answered and closed, not left waiting.
            refused = 0
            for sock in socks:
                refused += readable_now(sock)
            assert refused > 0
        finally:
            for sock in socks:
                sock.close()
        health = httpx.get(f"{demo.url}/healthz", timeout=CLIENT_S)
        assert health.status_code == 200


def test_accept_errors_are_logged_once_per_interval(tmp_path: Path) -> None:
    with demo_service_with(
        lambda: limit_fds(FDS),
        tmp_path,
        "accept-errors",
        JPUSHARE_HEADER_TIMEOUT_S="120",
        # A cap over what the limit allows (the service warns of it): accept fails.
        JPUSHARE_MAX_CONNECTIONS=str(FLOOD),
        JPUSHARE_MAX_CONNECTIONS_PER_PEER=str(FLOOD),
    ) as demo:
        socks = flood(demo.url, FLOOD)
        try:
            wait_for(lambda: "cannot accept connections" in demo.service.log(), "an accept error")
            time.sleep(4)  # asyncio retries the accept once a second
            log = demo.service.log()
        finally:
            for sock in socks:
                sock.close()
    assert "above the" in log  # the warning at start
    # Once, and once more a minute later with the count (on a slow machine): asyncio
    # itself logged a traceback per attempt, hundreds a second.
    assert 1 <= log.count("cannot accept connections") <= 2, log[-3000:]
    assert "out of system resource" not in log and "Traceback" not in log


def test_the_connection_settings_have_defaults_and_are_checked() -> None:
    from jpushare.config import ConfigError, load_settings
    from jpushare.service.http_server import limits_for

    connections = load_settings({}).connections
    assert (connections.header_timeout_s, connections.body_timeout_s) == (10.0, 10.0)
    limits = limits_for(connections, 20000)
    assert (limits.max_connections, limits.per_peer) == (4096, 256)
    assert limits_for(connections, 400).max_connections == 400 - connections.reserved_fds
    assert limits_for(connections, 400).per_peer == (400 - connections.reserved_fds) // 4
    with pytest.raises(ConfigError, match="JPUSHARE_RESERVED_FDS"):
        limits_for(connections, 260)
    for name, bad in (
        ("JPUSHARE_BODY_TIMEOUT_S", "0"),
        ("JPUSHARE_HEADER_TIMEOUT_S", "soon"),
        ("JPUSHARE_MAX_CONNECTIONS", "-1"),
        ("JPUSHARE_MAX_CONNECTIONS_PER_PEER", "1.5"),
        ("JPUSHARE_RESERVED_FDS", "8"),
    ):
        with pytest.raises(ConfigError, match=name):
            load_settings({name: bad})
