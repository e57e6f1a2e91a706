"""Request bodies over the limit get 413 before they are read whole, on every route,
authenticated or not: a real uvicorn server and a client that streams 200 MB. (Bodies that
come too slowly: tests/service/test_hostile_clients.py.)"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare.api import create_app
from jpushare.config import ConfigError, load_settings
from tests import raw_http
from tests.api.conftest import ApiWorld, Clock, build_world
from tests.client.server import running_server
from tests.raw_http import Response

BIG = 200 * 1024 * 1024
CHUNK = 256 * 1024
LIMIT = 1024 * 1024


@pytest.fixture
def served(sessions: sessionmaker[Session]) -> Iterator[tuple[str, dict[str, str]]]:
    tokens, _ = build_world(sessions, Clock())
    app = create_app(sessions, clock=Clock(), munge=None, max_body_bytes=LIMIT)
    with running_server(app) as url:
        yield url, tokens


def read_response(sock: socket.socket) -> Response:
    response = raw_http.read_response(sock)
    assert response is not None, "the connection closed before a response"
    return response


def stream(
    url: str, path: str, headers: str, chunked: bool, send_body: bool = True
) -> tuple[int, int, dict[str, Any]]:
    """Send a 200 MB body in pieces, reading between them; stop when an answer comes
    (`send_body=False`: send the headers only and wait). Returns (status, bytes of body sent,
    error)."""
    where = urlsplit(url)
    sock = socket.create_connection((where.hostname, where.port), timeout=30)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {BIG}"
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{headers}"
        f"{framing}\r\n\r\n".encode()
    )
    sent = 0
    piece = b"[" + b"1," * (CHUNK // 2 - 1) + b"1"
    try:
        while send_body and sent < BIG:
            if raw_http.readable_now(sock):
                break
            data = piece if not chunked else f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
            try:
                sock.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(piece)
        status, response_headers, body = read_response(sock)
    finally:
        sock.close()
    if status == 413:
        assert response_headers["connection"] == "close"
    return status, sent, body


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("authenticated", [False, True], ids=["anonymous", "token"])
@pytest.mark.parametrize(
    "path", ["/v1/jobs", "/v1/admin/labs", "/v1/jobs/1/cancel", "/v1/no-such-route"]
)
def test_a_200_mb_body_gets_413_before_it_is_sent_whole(
    served: tuple[str, dict[str, str]], chunked: bool, authenticated: bool, path: str
) -> None:
    url, tokens = served
    auth = f"Authorization: Bearer {tokens['root']}\r\n" if authenticated else ""
    if not chunked:
        # answered on the Content-Length alone: not a byte of the body is sent
        status, sent, body = stream(url, path, auth, chunked, send_body=False)
        assert (status, sent) == (413, 0)
    else:
        status, sent, body = stream(url, path, auth, chunked)
        assert sent < BIG  # answered before the client finished sending
        # every body is read (counted) before the app runs, whether the route takes one
        # or not, before authentication: 413 at the limit
        assert status == 413
    assert body["error"]["code"] == "PAYLOAD_TOO_LARGE"
    assert body["error"]["details"] == {"limit_bytes": LIMIT}
    assert f"({LIMIT} bytes)" in body["error"]["message"]


def test_a_body_under_the_limit_is_served(api: ApiWorld) -> None:
    r = api.post("/v1/jobs", json={"workdir": "/tmp", "command": "x" * (LIMIT // 2), "num_gpus": 1})
    assert r.status_code == 422 and r.json()["error"]["code"] == "VALIDATION_ERROR"  # too long
    r = api.post(
        "/v1/jobs", json={"workdir": "/tmp", "command": "true", "num_gpus": 1, "name": "n" * 100}
    )
    assert r.status_code == 201


def test_the_limit_is_a_setting() -> None:
    assert load_settings({}).max_body_bytes == 1024 * 1024
    assert load_settings({"JPUSHARE_MAX_BODY_BYTES": "4096"}).max_body_bytes == 4096
    for bad in ("1k", "-5", "100"):
        with pytest.raises(ConfigError, match="JPUSHARE_MAX_BODY_BYTES"):
            load_settings({"JPUSHARE_MAX_BODY_BYTES": bad})
