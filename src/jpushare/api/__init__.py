"""The JPU-Share REST API (FastAPI): `create_app(sessions, ...)` builds it; see `app`.

Modules: `app` (the factory), `routes/` (handlers, one module per area), `schemas` (bodies),
`deps` (session, user and context dependencies), `errors` (the error envelope), `why` (the
queue and "why" answers from the pure policy), `permissions`, `figures` (GPU counts and
the /metrics figures, from the store's reads). No SQL: every query is the store's.
"""

from jpushare.api.app import create_app, metrics_of

__all__ = ["create_app", "metrics_of"]
