"""A real `jpushare serve --demo` on a free port and a fresh state folder, until the block
ends: what the tests of the demo, of the API workers and of the replay each start."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.dispatcher.conftest import wait_for
from tests.dispatcher.processes import REPO, Service, start_service

TOKENS_FILE = "demo-tokens.env"  # in the state folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def read_env_file(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export ") :].partition("=")
            out[key] = value.split()[0]
    return out


@dataclass(frozen=True)
class DemoService:
    service: Service
    url: str
    tokens: dict[str, str]  # the demo's tokens file: JPUSHARE_URL, JPUSHARE_TOKEN, ..._ADMIN


@contextmanager
def demo_service(
    tmp_path: Path, name: str, *args: str, cycled: bool = False, **settings: str
) -> Iterator[DemoService]:
    """`serve --demo *args` with this process's environment less its JPUSHARE_* settings,
    plus `settings`; ready once it answers /healthz (`cycled`: and has run a cycle). It
    must exit 0 on SIGTERM at the end."""
    with demo_service_with(None, tmp_path, name, *args, cycled=cycled, **settings) as demo:
        yield demo


@contextmanager
def demo_service_with(
    preexec: Callable[[], None] | None,
    tmp_path: Path,
    name: str,
    *args: str,
    cycled: bool = False,
    **settings: str,
) -> Iterator[DemoService]:
    """`demo_service`, with `preexec` run in the service's process first (`start_service`:
    e.g. to lower a limit)."""
    port = free_port()
    state = tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JPUSHARE_")}
    env.update(JPUSHARE_STATE_DIR=str(state), JPUSHARE_PORT=str(port), **settings)
    service = start_service(name, env, tmp_path, "--demo", *args, cwd=REPO, preexec=preexec)
    url = f"http://127.0.0.1:{port}"
    tokens = state / TOKENS_FILE

    def ready() -> bool:
        assert service.proc.poll() is None, service.log()
        if not tokens.exists():
            return False
        try:
            health = httpx.get(f"{url}/healthz", timeout=5)
        except httpx.HTTPError:
            return False
        if not cycled:
            return health.status_code == 200
        try:
            return bool((health.json().get("dispatcher") or {}).get("last_success_at"))
        except ValueError:
            return False

    try:
        wait_for(ready, f"the demo service ({name}) answers" + (" and has run a cycle" * cycled))
        yield DemoService(service, url, read_env_file(tokens))
    finally:
        code = service.stop()
        assert code == 0, service.log()
