"""Service settings, read from the environment when asked (never at import time).

Every setting has an embedded default, so `jpushare serve` runs on a fresh machine with
SQLite and the local executor. Variables:

- JPUSHARE_DATABASE_URL: SQLAlchemy URL (postgresql+psycopg://… for PostgreSQL);
  default sqlite:///<state dir>/jpushare.sqlite
- JPUSHARE_STATE_DIR: SQLite file, local executor's runs and logs; default ./var
- JPUSHARE_EXECUTOR: `local` (default) or `slurm`
- JPUSHARE_CYCLE_S: seconds between dispatch cycles; default 5
- JPUSHARE_ROUTER_URL: the LLM backfill router; unset = no router
- JPUSHARE_HOST / JPUSHARE_PORT: where the API listens; default 127.0.0.1 / 8000
- JPUSHARE_CLUSTER: a cluster file (simulator format) declaring GPUs for the local executor
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


class ConfigError(ValueError):
    """A setting has a value the service cannot use; the message names it."""


@dataclass(frozen=True, slots=True)
class Settings:
    database_url: str
    state_dir: Path
    executor: str
    cycle_s: float
    router_url: str | None
    host: str
    port: int
    cluster_file: Path | None


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Settings from `env` (default: the process environment), with clear errors."""
    e = os.environ if env is None else env
    state_dir = Path(e.get("JPUSHARE_STATE_DIR", "var"))
    url = e.get("JPUSHARE_DATABASE_URL") or f"sqlite:///{state_dir / 'jpushare.sqlite'}"
    executor = e.get("JPUSHARE_EXECUTOR", "local")
    if executor not in ("local", "slurm"):
        raise ConfigError(f"JPUSHARE_EXECUTOR must be 'local' or 'slurm', not {executor!r}")
    try:
        cycle_s = float(e.get("JPUSHARE_CYCLE_S", "5"))
        port = int(e.get("JPUSHARE_PORT", "8000"))
    except ValueError as exc:
        raise ConfigError(f"JPUSHARE_CYCLE_S / JPUSHARE_PORT must be numbers: {exc}") from exc
    if cycle_s <= 0:
        raise ConfigError("JPUSHARE_CYCLE_S must be positive")
    cluster = e.get("JPUSHARE_CLUSTER")
    return Settings(
        database_url=url,
        state_dir=state_dir,
        executor=executor,
        cycle_s=cycle_s,
        router_url=e.get("JPUSHARE_ROUTER_URL") or None,
        host=e.get("JPUSHARE_HOST", "127.0.0.1"),
        port=port,
        cluster_file=Path(cluster) if cluster else None,
    )
