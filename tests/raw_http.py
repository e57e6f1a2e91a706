"""Reading one HTTP response off a bare socket: for the tests that speak to a real server
below httpx (half-sent requests, refused connections), where a client library would retry,
pool or hide what the server did."""

from __future__ import annotations

import json
import select
import socket
from typing import Any

Response = tuple[int, dict[str, str], dict[str, Any]]  # status, headers (lower-case), JSON


def read_response(sock: socket.socket) -> Response | None:
    """The response on `sock` (its JSON body, `{}` if empty), or None if the server closed
    or reset the connection without one."""
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            part = sock.recv(65536)
            if not part:
                return None
            data += part
    except ConnectionResetError:
        return None
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", "0")):
        part = sock.recv(65536)
        if not part:
            break
        body += part
    return int(lines[0].split()[1]), headers, json.loads(body) if body else {}


def readable_now(sock: socket.socket) -> bool:
    """Whether `sock` has something to read (an answer, or its close) this instant. poll,
    not select: a test holding a thousand sockets has descriptors past select's 1024."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))
