"""`Client`: an httpx client with one method per API endpoint, and its typed `ApiError`.

All I/O passes through `_call`, which turns every non-2xx answer into `ApiError` with the
server's `{"error": {code, message, details}}`, and a connection failure into code
UNREACHABLE; tests can pass `transport=httpx.MockTransport(handler)`.

Authentication: a token (`Authorization: Bearer …`) when one is given; else, with a
`Munge`, a fresh MUNGE credential per request naming that request (`MungeAuth`), the way
Slurm's commands authenticate: no token needed on a host of the cluster.

`printable=True` (the CLI's human output) passes every answer and error message through
`formatting.printable`, so no string another user wrote reaches the terminal with its
control characters; a log's text is left as it is (the CLI decides, knowing whose it is).
Scripts and `--json` get the API's answers exactly.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator, Mapping, Sequence
from types import ModuleType, TracebackType
from typing import Any


def _skip_httpx_command_line() -> None:
    """httpx's package imports its own command line (`httpx._main`: click, pygments, rich)
    whenever click is installed, as it is beside the server (uvicorn needs it): a quarter
    of the CLI's start-up, for code no client runs. Where httpx is not imported yet, a stub
    stands in for that one module (its `main` says so); every other part of httpx is real."""
    if "httpx" in sys.modules or "httpx._main" in sys.modules:
        return
    stub = ModuleType("httpx._main")

    def main() -> None:
        raise SystemExit("httpx's command line is not loaded in the jpushare client")

    stub.main = main  # type: ignore[attr-defined]
    sys.modules["httpx._main"] = stub


_skip_httpx_command_line()

import httpx  # noqa: E402 (after the stub above)

from jpushare.client.formatting import clean, printable  # noqa: E402
from jpushare.munge import Munge, MungeError, request_payload  # noqa: E402

JSON = dict[str, Any]


class MungeAuth(httpx.Auth):
    """`Authorization: MUNGE <credential>` on every request, made for that request only
    (method, path, query and body digest in the payload), so a captured one is good for
    nothing else."""

    requires_request_body = True  # httpx reads it before auth_flow: its digest is signed

    def __init__(self, munge: Munge) -> None:
        self.munge = munge

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        payload = request_payload(
            request.method, request.url.path, request.url.query.decode("ascii"), request.content
        )
        try:
            credential = self.munge.encode(payload)
        except MungeError as exc:
            raise ApiError(
                "MUNGE",
                f"munge could not make a credential ({exc.message}): is munged running? "
                "Or use a token (JPUSHARE_TOKEN)",
            ) from exc
        request.headers["Authorization"] = f"MUNGE {credential}"
        yield request


_PROXY_VARIABLES = ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def _plain_http_without_proxy(url: str) -> bool:
    """An `http://` API reached directly: its transport needs no TLS context, whose CA
    bundle httpx would otherwise load for every command (a third of `jpushare queue`'s
    start-up). No TLS connection can come of it: every request goes to this http:// base
    URL and redirects are not followed. With a proxy variable set, httpx's default
    transport (which honours it) is kept."""
    return url.lower().startswith("http://") and not any(
        os.environ.get(name) for name in _PROXY_VARIABLES
    )


class ApiError(Exception):
    """The API said no (or could not be reached). `status` is 0 when there was no answer."""

    def __init__(
        self, code: str, message: str, status: int = 0, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.details: dict[str, Any] = dict(details or {})


class Client:
    """The JPU-Share REST API at `url`, authenticated with `token`, else with `munge`."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        munge: Munge | None = None,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        printable: bool = False,
    ) -> None:
        headers = {"Accept": "application/json", "User-Agent": "jpushare-client"}
        auth: httpx.Auth | None = None
        if token:  # a token wins: it names the user even where accounts are shared
            headers["Authorization"] = f"Bearer {token}"
        elif munge is not None:
            auth = MungeAuth(munge)
        self.url = url.rstrip("/")
        self.printable = printable
        if transport is None and _plain_http_without_proxy(self.url):
            transport = httpx.HTTPTransport(verify=False)  # see _plain_http_without_proxy
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout_s, transport=transport, auth=auth
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- the one I/O method ----------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        given = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            answer = self._answer(method, path, json, given)
        except ApiError as exc:
            if self.printable:
                exc.code, exc.message = clean(exc.code), clean(exc.message)
                exc.details = printable(exc.details)
            raise
        if not self.printable or isinstance(answer, str):
            return answer
        if path.endswith("/log") and isinstance(answer, dict):
            return {
                **printable({k: v for k, v in answer.items() if k != "log"}),
                "log": answer.get("log", ""),
            }
        return printable(answer)

    def _object(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> JSON:
        """`_call` typed for what every endpoint but /metrics answers: a JSON object."""
        result: JSON = self._call(method, path, json=json, params=params)
        return result

    def _answer(self, method: str, path: str, json: Any, params: Mapping[str, Any]) -> Any:
        try:
            response = self._http.request(method, path, json=json, params=params)
        except httpx.TimeoutException as exc:
            raise ApiError("UNREACHABLE", f"{self.url} did not answer in time ({exc})") from exc
        except httpx.TransportError as exc:
            raise ApiError("UNREACHABLE", f"cannot reach {self.url}: {exc}") from exc
        if response.is_success:
            if path == "/metrics":
                return response.text
            try:
                return response.json()
            except ValueError as exc:
                raise ApiError(
                    "BAD_RESPONSE", f"{method} {path}: not JSON", response.status_code
                ) from exc
        try:
            error = response.json()["error"]
            raise ApiError(
                str(error["code"]),
                str(error["message"]),
                response.status_code,
                error.get("details") or {},
            )
        except (ValueError, KeyError, TypeError):
            raise ApiError(
                "BAD_RESPONSE",
                f"{method} {path}: HTTP {response.status_code} {response.text[:200]!r}",
                response.status_code,
            ) from None

    # --- jobs ------------------------------------------------------------------------------

    def submit(
        self,
        name: str,
        command: str,
        num_gpus: int,
        *,
        min_tier: str | None = None,
        time_limit_s: float | None = None,
        workdir: str | None = None,
        environment: dict[str, str] | None = None,
        output_path: str | None = None,
        error_path: str | None = None,
        cpus_per_gpu: int | None = None,
        mem_per_gpu_mb: int | None = None,
        mail_type: list[str] | None = None,
        mail_user: str | None = None,
        eligibility: JSON | None = None,  # hold, dependency, kill_on_invalid_dep, array
    ) -> JSON:
        body: JSON = {"name": name, "command": command, "num_gpus": num_gpus}
        body.update({k: v for k, v in (eligibility or {}).items() if v not in (None, False)})
        optional = {
            "min_tier": min_tier,
            "time_limit_s": time_limit_s,
            "workdir": workdir,
            "environment": environment,
            "output_path": output_path,
            "error_path": error_path,
            "cpus_per_gpu": cpus_per_gpu,
            "mem_per_gpu_mb": mem_per_gpu_mb,
            "mail_type": mail_type,
            "mail_user": mail_user,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        return self._object("POST", "/v1/jobs", json=body)

    def jobs(
        self,
        *,
        states: Sequence[str] = (),
        lab: str | None = None,
        mine: bool = False,
        before_id: int | None = None,
        limit: int | None = None,
        user: str | None = None,
        name: str | None = None,
        since: str | None = None,
        until: str | None = None,
        waiting: bool | None = None,
    ) -> JSON:
        params: dict[str, Any] = {
            "waiting": None if waiting is None else str(waiting).lower(),
            "state": list(states) or None,
            "lab": lab,
            "mine": "true" if mine else None,
            "before_id": before_id,
            "limit": limit,
            "user": user,
            "name": name,
            "since": since,
            "until": until,
        }
        return self._object("GET", "/v1/jobs", params=params)

    def job(self, job_id: int) -> JSON:
        return self._object("GET", f"/v1/jobs/{job_id}")

    def attempts(self, job_id: int) -> JSON:
        return self._object("GET", f"/v1/jobs/{job_id}/attempts")

    def cancel(self, job_id: int) -> JSON:
        return self._object("POST", f"/v1/jobs/{job_id}/cancel")

    def hold(self, job_id: int) -> JSON:
        return self._object("POST", f"/v1/jobs/{job_id}/hold")

    def release(self, job_id: int) -> JSON:
        return self._object("POST", f"/v1/jobs/{job_id}/release")

    def update(self, job_id: int, changes: JSON) -> JSON:
        return self._object("PATCH", f"/v1/jobs/{job_id}", json=changes)

    def array_tasks(self, array_job_id: int) -> list[JSON]:
        """Every task of the array (an array has at most 1000: one page)."""
        page = self._call("GET", "/v1/jobs", params={"array": array_job_id, "limit": 1000})
        data: list[JSON] = page["data"]
        return data

    def why(self, job_id: int) -> JSON:
        return self._object("GET", f"/v1/jobs/{job_id}/why")

    def log(
        self, job_id: int, attempt: int | None = None, *, stderr: bool = False, offset: int = 0
    ) -> JSON:
        params: dict[str, Any] = {"attempt": attempt}
        if stderr:
            params["stderr"] = "true"
        if offset:
            params["offset"] = offset
        return self._object("GET", f"/v1/jobs/{job_id}/log", params=params)

    # --- the cluster -----------------------------------------------------------------------

    def queue(self, *, offset: int | None = None, limit: int | None = None) -> JSON:
        return self._object("GET", "/v1/queue", params={"offset": offset, "limit": limit})

    def placements(self) -> JSON:
        return self._object("GET", "/v1/placements")

    def labs(self) -> JSON:
        return self._object("GET", "/v1/labs")

    def tiers(self) -> JSON:
        return self._object("GET", "/v1/tiers")

    def watch(self, since: str | None = None) -> JSON:
        """The SPEC §10 watch-list from `since` (a duration like 7d, or an ISO time)."""
        return self._object("GET", "/v1/stats/watch", params={"since": since})

    def healthz(self) -> JSON:
        return self._object("GET", "/healthz")

    def metrics(self) -> str:
        text: str = self._call("GET", "/metrics")
        return text

    # --- admin -----------------------------------------------------------------------------

    def create_tier(
        self,
        name: str,
        tflops: float,
        sort_order: int,
        *,
        max_gpus: int = 8,
        auto_assign: bool = True,
        partition: str | None = None,
    ) -> JSON:
        body = {
            "name": name,
            "tflops": tflops,
            "sort_order": sort_order,
            "max_gpus": max_gpus,
            "auto_assign": auto_assign,
            "partition": partition,
        }
        return self._object("POST", "/v1/admin/tiers", json=body)

    def update_tier(self, name: str, **fields: Any) -> JSON:
        return self._object("PATCH", f"/v1/admin/tiers/{name}", json=fields)

    def nodes(self) -> JSON:
        return self._object("GET", "/v1/admin/nodes")

    def set_node_gpus(self, node: str, gpus: Mapping[str, int]) -> JSON:
        return self._object("PUT", f"/v1/admin/nodes/{node}/gpus", json={"gpus": gpus})

    def drain_node(self, node: str, reason: str) -> JSON:
        return self._object("POST", f"/v1/admin/nodes/{node}/drain", json={"reason": reason})

    def undrain_node(self, node: str) -> JSON:
        return self._object("POST", f"/v1/admin/nodes/{node}/undrain")

    def remove_node(self, node: str) -> JSON:
        return self._object("DELETE", f"/v1/admin/nodes/{node}")

    def set_gpu_schedulable(self, node: str, tier: str, index: int, schedulable: bool) -> JSON:
        return self._object(
            "PUT",
            f"/v1/admin/nodes/{node}/gpus/{tier}/{index}",
            json={"schedulable": schedulable},
        )

    def create_lab(self, name: str) -> JSON:
        return self._object("POST", "/v1/admin/labs", json={"name": name})

    def create_user(
        self,
        name: str,
        lab: str,
        role: str = "student",
        unix_user: str | None = None,
        *,
        allow_root: bool = False,
    ) -> JSON:
        body: JSON = {"name": name, "lab": lab, "role": role}
        if unix_user is not None:
            body["unix_user"] = unix_user
        if allow_root:  # an account with uid 0 is refused without it (422 ROOT_ACCOUNT)
            body["allow_root"] = True
        return self._object("POST", "/v1/admin/users", json=body)

    def users(self, lab: str | None = None) -> JSON:
        return self._object("GET", "/v1/admin/users", params={"lab": lab})

    def issue_token(self, user: str, label: str = "") -> JSON:
        return self._object("POST", f"/v1/admin/users/{user}/tokens", json={"label": label})

    def tokens(self, user: str) -> JSON:
        return self._object("GET", f"/v1/admin/users/{user}/tokens")

    def revoke_token(self, token_id: int) -> JSON:
        return self._object("POST", f"/v1/admin/tokens/{token_id}/revoke")
