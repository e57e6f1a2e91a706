"""The client of the LLM backfill router (SPEC §6): "yield these GPUs, a research job comes".

At dispatch the dispatcher calls `request_yield(...)` and starts the job right after, without
waiting: the POST goes out on a small thread pool, with a short connect timeout, and its
failure (router down, refused, non-2xx) is logged, never raised. The router stops routing to
models that are shutting down; JPU-Share never waits for it. `NoRouter` is the same interface
doing nothing, for a service without a router (`JPUSHARE_ROUTER_URL` unset).

Named `llm_router` (not `router`) so that it is not mistaken for the REST API's routers.

The request: `POST {router_url}/v1/yield` with JSON `{"node", "tier", "num_gpus", "job_id"}`
and `"gpus"`, the job's exact GPU indices on the node, where JPU-Share knows them (the
local executor picks them; Slurm does at its own start, and yields itself by preemption):
docs/formats.md, "LLM router yield".
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Protocol

import httpx

log = logging.getLogger(__name__)

YIELD_PATH = "/v1/yield"


class BackfillRouter(Protocol):
    """What the dispatcher needs from the LLM router."""

    def request_yield(
        self, node: str, tier: str, num_gpus: int, job_id: str, gpus: Sequence[int] | None = None
    ) -> None:
        """Ask the router to stop LLM backfill on `num_gpus` GPUs of (node, tier). Never blocks."""
        ...

    def close(self) -> None:
        """Finish or drop what is in flight and release the client."""
        ...


class NoRouter:
    """No LLM router configured: yielding is a no-op."""

    def request_yield(
        self, node: str, tier: str, num_gpus: int, job_id: str, gpus: Sequence[int] | None = None
    ) -> None:
        return None

    def close(self) -> None:
        return None


class HttpRouter:
    """Fire-and-forget POSTs to `{url}/v1/yield` from a background thread pool.

    `connect_timeout_s` bounds how long a worker waits for an unreachable router;
    `timeout_s` bounds a slow one, so a stuck router cannot pile up threads for long.
    """

    def __init__(
        self,
        url: str,
        *,
        connect_timeout_s: float = 1.0,
        timeout_s: float = 10.0,
        max_workers: int = 4,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            transport=transport,
        )
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="llm-yield")
        self._pending: set[Future[None]] = set()
        self._pending_lock = threading.Lock()

    def request_yield(
        self, node: str, tier: str, num_gpus: int, job_id: str, gpus: Sequence[int] | None = None
    ) -> None:
        body: dict[str, str | int | list[int]] = {
            "node": node,
            "tier": tier,
            "num_gpus": num_gpus,
            "job_id": job_id,
        }
        if gpus is not None:
            body["gpus"] = [int(g) for g in gpus]
        try:
            future = self._pool.submit(self._post, body)
        except RuntimeError as exc:  # the pool is shut down: the service is stopping
            log.warning("LLM router: yield for job %s not sent: %s", job_id, exc)
            return
        with self._pending_lock:
            self._pending.add(future)
        future.add_done_callback(self._forget)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until the requests sent so far are done; True if all are (tests, shutdown)."""
        with self._pending_lock:
            pending = set(self._pending)
        _, not_done = wait_futures(pending, timeout=timeout_s)
        return not not_done

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)
        self._client.close()

    def _forget(self, future: Future[None]) -> None:
        with self._pending_lock:
            self._pending.discard(future)

    def _post(self, body: dict[str, str | int | list[int]]) -> None:
        """One POST on a worker thread; every failure ends in the log."""
        try:
            response = self._client.post(self.url + YIELD_PATH, json=body)
        except Exception as exc:  # httpx errors, a bad URL …: a worker has nobody to raise to
            log.warning(
                "LLM router %s unreachable; yield for job %s on %s/%s not delivered: %s",
                self.url,
                body["job_id"],
                body["node"],
                body["tier"],
                str(exc) or type(exc).__name__,
            )
            return
        if response.is_success:
            log.debug(
                "LLM router yielded %s GPUs on %s/%s", body["num_gpus"], body["node"], body["tier"]
            )
        else:
            log.warning(
                "LLM router %s answered %s to the yield for job %s: %s",
                self.url,
                response.status_code,
                body["job_id"],
                response.text[:200],
            )


def router_for(url: str | None) -> BackfillRouter:
    """The router client for a configured URL (`Settings.router_url`); `NoRouter` if None."""
    return HttpRouter(url) if url else NoRouter()
