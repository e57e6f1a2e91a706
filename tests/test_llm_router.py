"""The LLM backfill router client against a real local HTTP server (SPEC §6)."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jpushare.llm_router import HttpRouter, NoRouter, router_for


@dataclass
class RouterServer:
    """A real HTTP server on 127.0.0.1 that records every request it gets."""

    url: str
    requests: list[tuple[str, str, dict[str, object]]] = field(default_factory=list)
    received: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    delay_s: float = 0.0  # answer only after this long (or when released)
    status: int = 200


def serve(server: RouterServer) -> tuple[ThreadingHTTPServer, threading.Thread]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            server.requests.append((self.path, self.headers.get("Content-Type", ""), body))
            server.received.set()
            if server.delay_s:
                server.release.wait(server.delay_s)
            self.send_response(server.status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    return httpd, thread


@pytest.fixture
def router_server() -> Iterator[RouterServer]:
    server = RouterServer(url="")
    httpd, thread = serve(server)
    yield server
    server.release.set()
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_a_dispatch_posts_node_tier_gpus_and_job_to_v1_yield(router_server: RouterServer) -> None:
    router = HttpRouter(router_server.url + "/")
    router.request_yield("node-a", "rtx4090", 2, "job-42")
    assert router.flush(5)
    router.close()

    assert router_server.requests == [
        (
            "/v1/yield",
            "application/json",
            {"node": "node-a", "tier": "rtx4090", "num_gpus": 2, "job_id": "job-42"},
        )
    ]


def test_the_exact_gpus_are_named_where_they_are_known(router_server: RouterServer) -> None:
    router = HttpRouter(router_server.url)
    router.request_yield("node-c", "rtx5090", 2, "job-43", gpus=(2, 3))
    assert router.flush(5)
    router.close()
    (request,) = router_server.requests
    assert request[2] == {
        "node": "node-c",
        "tier": "rtx5090",
        "num_gpus": 2,
        "job_id": "job-43",
        "gpus": [2, 3],
    }


def test_the_dispatch_does_not_wait_for_a_slow_router(router_server: RouterServer) -> None:
    router_server.delay_s = 5.0
    router = HttpRouter(router_server.url)

    started = time.monotonic()
    router.request_yield("node-a", "rtx4090", 1, "job-1")
    returned_after_s = time.monotonic() - started

    assert router_server.received.wait(5), "the request never reached the router"
    assert returned_after_s < 1.0  # the router answers after 5 s; we went on long before
    assert not router.flush(0.05)  # still in flight: nobody waited for it
    router_server.release.set()
    assert router.flush(5)
    router.close()


def test_an_unreachable_router_is_logged_and_does_not_raise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    router = HttpRouter(closed_port_url(), connect_timeout_s=0.5)
    with caplog.at_level(logging.WARNING, logger="jpushare.llm_router"):
        started = time.monotonic()
        router.request_yield("node-b", "rtx5090", 4, "job-7")
        assert time.monotonic() - started < 1.0
        assert router.flush(5)
    router.close()

    assert any(
        "unreachable" in r.getMessage() and "job-7" in r.getMessage() for r in caplog.records
    )


def test_a_router_error_answer_is_logged(
    router_server: RouterServer, caplog: pytest.LogCaptureFixture
) -> None:
    router_server.status = 503
    router = HttpRouter(router_server.url)
    with caplog.at_level(logging.WARNING, logger="jpushare.llm_router"):
        router.request_yield("node-a", "rtx4090", 1, "job-9")
        assert router.flush(5)
    router.close()

    assert any("503" in r.getMessage() for r in caplog.records)


def test_a_yield_after_close_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    router = HttpRouter(closed_port_url())
    router.close()
    with caplog.at_level(logging.WARNING, logger="jpushare.llm_router"):
        router.request_yield("node-a", "rtx4090", 1, "job-10")
    assert any("not sent" in r.getMessage() for r in caplog.records)


def test_without_a_url_there_is_no_router() -> None:
    assert isinstance(router_for(None), NoRouter)
    assert isinstance(router_for(""), NoRouter)
    NoRouter().request_yield("node-a", "rtx4090", 1, "job-1")
    routed = router_for("http://127.0.0.1:9")
    assert isinstance(routed, HttpRouter)
    routed.close()
