"""Where the client finds the API: URL and token from flags, environment or a file.

Precedence, first found wins, separately for the URL and the token:

1. `--url` / `--token-file PATH` on the command line (`-`: stdin). The token itself is
   never taken as an argument: every user of the host can read a process's arguments
   (`jpushare.client.token_args`);
2. `JPUSHARE_URL` / `JPUSHARE_TOKEN` in the environment;
3. the config file: `$JPUSHARE_CLIENT_CONFIG` if set, else
   `$XDG_CONFIG_HOME/jpushare/client.json` (default `~/.config/jpushare/client.json`),
   a JSON object `{"url": "http://host:8000", "token": "jps_…"}` (both keys optional;
   keep it private: `chmod 600`);
4. the URL defaults to http://127.0.0.1:8000 (the service's default address); there is no
   default token.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8000"
URL_ENV = "JPUSHARE_URL"
TOKEN_ENV = "JPUSHARE_TOKEN"
CONFIG_ENV = "JPUSHARE_CLIENT_CONFIG"


class ClientConfigError(ValueError):
    """The config file exists but cannot be used; the message names it."""


@dataclass(frozen=True, slots=True)
class ClientConfig:
    url: str
    token: str | None
    source: str  # where the token came from, for error messages


def config_path(env: Mapping[str, str]) -> Path:
    explicit = env.get(CONFIG_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    base = env.get("XDG_CONFIG_HOME", "").strip()
    root = Path(base).expanduser() if base else Path.home() / ".config"
    return root / "jpushare" / "client.json"


def _read_file(path: Path, must_exist: bool) -> dict[str, str]:
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if must_exist:
            raise ClientConfigError(f"{path}: no such file ({CONFIG_ENV} names it)") from None
        return {}
    except OSError as exc:
        raise ClientConfigError(f"{path}: cannot read it: {exc}") from exc
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ClientConfigError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ClientConfigError(f'{path}: must be a JSON object like {{"url": …, "token": …}}')
    out: dict[str, str] = {}
    for key in ("url", "token"):
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise ClientConfigError(f"{path}: {key!r} must be a string")
        if value:
            out[key] = value
    return out


def load_client_config(
    url: str | None = None, token: str | None = None, env: Mapping[str, str] | None = None
) -> ClientConfig:
    """The URL and token to use (see the module docstring for the order); `token` is one
    the command read from its --token-file."""
    e = os.environ if env is None else env
    path = config_path(e)
    file = _read_file(path, must_exist=bool(e.get(CONFIG_ENV, "").strip()))
    final_url = url or e.get(URL_ENV, "").strip() or file.get("url") or DEFAULT_URL
    if token:
        final_token: str | None = token
        source = "--token-file"
    elif e.get(TOKEN_ENV, "").strip():
        final_token = e[TOKEN_ENV].strip()
        source = TOKEN_ENV
    elif file.get("token"):
        final_token = file["token"]
        source = str(path)
    else:
        final_token = None
        source = "nowhere"
    return ClientConfig(final_url, final_token, source)
