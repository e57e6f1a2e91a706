"""The JPU-Share API client for users and scripts: `Client`, one method per endpoint.

    from jpushare.client import Client, ApiError
    with Client("http://127.0.0.1:8000", token) as api:
        job = api.submit("train", "python train.py", num_gpus=2, workdir="/home/me/project")
        print(api.why(job["id"])["sentence"])

Methods return the API's JSON (dicts); every failure raises `ApiError` carrying the API's
error code, message and details (or UNREACHABLE / BAD_RESPONSE when there is no proper
answer). `jpushare.client.cli` is the command line on top of it; `config` finds the URL and
token. Importing this package does not import the server (FastAPI, SQLAlchemy), nor httpx
until `Client` or `ApiError` is first used (so `jpushare jobs --help` starts at once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jpushare.client.config import ClientConfig, load_client_config

if TYPE_CHECKING:
    from jpushare.client.api import ApiError, Client

__all__ = ["ApiError", "Client", "ClientConfig", "load_client_config"]


def __getattr__(name: str) -> Any:
    if name in ("ApiError", "Client"):
        from jpushare.client import api

        return getattr(api, name)
    raise AttributeError(f"module 'jpushare.client' has no attribute {name!r}")
