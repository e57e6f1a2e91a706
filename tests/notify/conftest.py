"""Notification fixtures: both databases, a real SMTP server (aiosmtpd) that keeps what it
receives, a relay that accepts connections and never answers, and a real HTTP server that
fails its first answers."""

from __future__ import annotations

import email
import email.policy
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Received:
    """One message the SMTP server accepted: its envelope recipients and the message."""

    rcpt: list[str]
    message: EmailMessage

    @property
    def subject(self) -> str:
        return str(self.message["Subject"])


@dataclass
class MailBox:
    host: str
    port: int
    messages: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        with self.lock:
            self.messages.append(Received(list(envelope.rcpt_tos), message))
        return "250 OK"

    def subjects(self) -> list[str]:
        with self.lock:
            return [m.subject for m in self.messages]

    def received(self) -> list[Received]:
        with self.lock:
            return list(self.messages)


@pytest.fixture
def mailbox() -> Iterator[MailBox]:
    """A real SMTP server on 127.0.0.1 (no TLS, no authentication)."""
    box = MailBox("127.0.0.1", free_port())
    controller = Controller(box, hostname=box.host, port=box.port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()


@dataclass
class BlackHole:
    """A relay that accepts TCP connections and never says a word (a hung MTA)."""

    port: int
    accepted: int = 0
    _sock: socket.socket | None = None
    _held: list[socket.socket] = field(default_factory=list)

    def serve(self) -> None:
        assert self._sock is not None
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._held.append(conn)
            self.accepted += 1


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    hole = BlackHole(int(sock.getsockname()[1]), _sock=sock)
    threading.Thread(target=hole.serve, daemon=True).start()
    try:
        yield hole
    finally:
        sock.close()
        for conn in hole._held:
            conn.close()


@dataclass
class Webhook:
    """A real HTTP server: the first `fail_first` POSTs get `fail_status`, the rest 204."""

    url: str
    fail_first: int = 0
    fail_status: int = 503
    bodies: list[dict[str, Any]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook("")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            assert self.headers.get("Content-Type") == "application/json"
            with hook.lock:
                hook.bodies.append(body)
                status = hook.fail_status if len(hook.bodies) <= hook.fail_first else 204
                hook.statuses.append(status)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()
