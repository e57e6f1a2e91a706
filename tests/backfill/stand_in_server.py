"""A stand-in for vLLM: an OpenAI-compatible server the backfill tests (and `make run`) start.

It holds its GPUs as a real server would: for each index in CUDA_VISIBLE_DEVICES' source,
JPUSHARE_GPUS, an exclusive flock on `<markers>/<JPUSHARE_NODE>-gpu<N>` (and, with
--devices, an open descriptor on `<devices>/nvidia<N>`), taken before it answers and kept
until it exits.
A second holder of one of them exits 3 at once: a test job that flocks the same marker
non-blocking fails while a server still holds it. It answers GET /v1/models and GET /health.

    python tests/backfill/stand_in_server.py --port 8100 [--markers DIR] [--ignore-term]
        [--term-delay S]

--ignore-term: SIGTERM is ignored (the keeper's grace, then the cgroup kill, must end it).
--term-delay: after SIGTERM it keeps serving S seconds, then exits 0 (a slow drain).
Standard library only.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class Handler(BaseHTTPRequestHandler):
    server_version = "stand-in-llm/1"

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            body = {
                "object": "list",
                "data": [
                    {
                        "id": "stand-in",
                        "object": "model",
                        "owned_by": "jpushare-tests",
                        "gpus": os.environ.get("JPUSHARE_GPUS", ""),
                        "pid": os.getpid(),
                    }
                ],
            }
        elif self.path == "/health":
            body = {"status": "ok"}
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        return None


def marker_name(gpu: str) -> str:
    """`<node>-gpu<N>`: one file per GPU of the machine's (declared) nodes."""
    return f"{os.environ.get('JPUSHARE_NODE', 'node')}-gpu{gpu}"


def hold_gpus(markers: Path | None, devices: Path | None, gpus: list[str]) -> list[int]:
    """Open and lock what the GPUs stand for; exit 3 if another process holds one."""
    fds = []
    for g in gpus:
        if markers is not None:
            fd = os.open(markers / marker_name(g), os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"GPU {g} is held by another process", file=sys.stderr, flush=True)
                sys.exit(3)
            fds.append(fd)
        if devices is not None:
            fds.append(os.open(devices / f"nvidia{g}", os.O_RDONLY))
    return fds


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--markers", type=Path)
    p.add_argument("--devices", type=Path)
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--term-delay", type=float, default=0.0)
    args = p.parse_args()
    gpus = [g for g in os.environ.get("JPUSHARE_GPUS", "").split(",") if g]
    fds = hold_gpus(args.markers, args.devices, gpus)
    httpd = ThreadingHTTPServer((args.host, args.port), Handler)
    httpd.daemon_threads = True

    def on_term(signum: int, frame: object) -> None:
        if args.ignore_term:
            print("SIGTERM ignored", flush=True)
            return

        def drain() -> None:
            time.sleep(args.term_delay)
            httpd.shutdown()

        threading.Thread(target=drain, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    print(f"serving on {args.host}:{args.port}, GPUs {gpus}", flush=True)
    httpd.serve_forever()
    httpd.server_close()
    for fd in fds:
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
