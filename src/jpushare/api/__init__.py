"""The JPU-Share REST API (FastAPI): `create_app(sessions, ...)` builds it; see `app`.

Modules: `app` (the factory), `routes/` (handlers, one module per area), `schemas` (bodies),
`deps` (session, user and context dependencies), `errors` (the error envelope), `why` (the
queue and "why" answers from the pure policy), `permissions`, `queries` (read-only SQL the
store does not offer).
"""

from jpushare.api.app import create_app, metrics_of

__all__ = ["create_app", "metrics_of"]
