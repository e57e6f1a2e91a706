"""Fixtures for the dashboard's tests: a real server over a test database, a real browser.

- `served`: `jpushare.api.create_app` served by uvicorn on a free port of 127.0.0.1, in a
  thread, over a SQLite database holding `tests.web.scenario` (jobs in every state), with
  a frozen clock so a page and the JSON API answer for the same instant, and an executor
  stand-in whose `log` returns a known output. One per module (building it takes ~1 s).
- `browser`: Debian's Chromium (/usr/bin/chromium), headless, driven by Playwright (the
  Python package only: its own browser downloads are never used). Missing browser: the
  test is skipped, or fails with CI=true.
- `api`: the API tests' world (both databases), for the pages' HTTP tests.
- `screenshots`: the folder the page screenshots go to: $JPUSHARE_SCREENSHOT_DIR, default
  `out/web-screenshots` in the repository; its path is printed at the end of the run.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, cast

import httpx
import pytest
import uvicorn
from sqlalchemy.orm import Session, sessionmaker

from jpushare.api import create_app
from jpushare.executors.base import Executor
from jpushare.store.engine import make_engine, make_sessionmaker, sqlite_url
from jpushare.store.migrate import upgrade
from tests.api.conftest import ApiWorld, Clock, make_world
from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401
from tests.missing import missing
from tests.web.scenario import Scenario, build_scenario, observed

CHROMIUM = Path("/usr/bin/chromium")
BROWSER_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REPO = Path(__file__).resolve().parents[2]
SCREENSHOT_ENV = "JPUSHARE_SCREENSHOT_DIR"
REFRESH_S = 300
_written: list[Path] = []


class LogOnlyExecutor:
    """Answers `log` with a fixed output per job: the page must show what the API returns."""

    def __init__(self) -> None:
        self.outputs: dict[str, str] = {}

    def log(self, job_id: str, attempt: int) -> str:
        return self.outputs.get(job_id, "")

    def find(self, job_id: str, attempt: int) -> None:
        return None  # a cancel from a page finds no run to stop: the scenario's are records

    def cancel(self, executor_id: str) -> None:
        raise AssertionError("no run of the scenario has an executor id")


@dataclass
class Served:
    url: str
    scenario: Scenario
    clock: Clock
    executor: LogOnlyExecutor
    extra_busy: dict[tuple[str, str], int] = field(default_factory=dict)

    def api(self, path: str, user: str = "alice") -> Any:
        """The JSON API's answer, as the CLI would get it."""
        r = httpx.get(
            self.url + path, headers={"Authorization": f"Bearer {self.scenario.tokens[user]}"}
        )
        assert r.status_code == 200, r.text
        return r.json()


@pytest.fixture
def api(sessions: sessionmaker[Session]) -> Iterator[ApiWorld]:  # noqa: F811 (the fixture)
    """The API tests' world (tests/api/conftest.py) on both databases."""
    yield from make_world(sessions)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    url = sqlite_url(tmp_path_factory.mktemp("web") / "web.sqlite")
    upgrade(url)
    bind = make_engine(url)
    factory = make_sessionmaker(bind)
    clock = Clock()
    extra: dict[tuple[str, str], int] = {}
    scenario = build_scenario(factory, clock, extra)
    executor = LogOnlyExecutor()
    executor.outputs[str(scenario.jobs["llm-finetune"])] = "".join(
        f"epoch 1 step {i}: loss {2.0 / i:.4f} <b>not bold</b>\n" for i in range(1, 260)
    )
    with pytest.MonkeyPatch.context() as env:
        # A cycle longer than the tests: no page reloads itself under an assertion.
        env.setenv("JPUSHARE_CYCLE_S", str(REFRESH_S))
        app = create_app(
            factory,
            clock=clock,
            executor=cast(Executor, executor),
            observed_busy=lambda s: observed(s, extra),
            munge=None,
        )
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    yield Served(f"http://127.0.0.1:{port}", scenario, clock, executor, extra)
    server.should_exit = True
    thread.join(timeout=10)
    bind.dispose()


def _missing_browser(reason: str) -> NoReturn:
    missing(reason, "CI=true: the browser tests must run; `make services` installs it")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        _missing_browser(f"no {CHROMIUM} (Debian: apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing_browser("the playwright package is not installed (requirements.lock)")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    folder = Path(os.environ.get(SCREENSHOT_ENV) or REPO / "out" / "web-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def save_screenshot(page: Any, folder: Path, name: str) -> Path:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    _written.append(path)
    return path


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _written:
        folder = _written[0].parent
        terminalreporter.write_line(f"dashboard screenshots ({len(_written)}): {folder}")
