"""The server side of the `jpushare` command: `serve`, `init --cluster`, `admin …`.

- `cli`: `register(subparsers)` (the commands and their arguments);
- `serve`: building the service from `Settings` (database, executor, router, dispatcher
  thread, API under uvicorn) and shutting it down cleanly;
- `demo`: what `serve --demo` adds on a fresh machine (example cluster, users, tokens file);
- `admin`: the `admin` sub-commands, talking to the database directly (server side).
"""
