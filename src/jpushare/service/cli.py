"""The server's commands for `jpushare`: `serve`, `init --cluster FILE`, `admin …`, `backfill`.

`register(subparsers)` adds them (listed in `jpushare.cli.COMMAND_MODULES`); each parser
sets `func` (args -> exit code). `python -m jpushare.service` runs just these commands.
"""

from __future__ import annotations

import argparse
import logging
import sys

from jpushare import store
from jpushare.config import ConfigError, load_settings
from jpushare.formats.errors import ClusterFileError
from jpushare.service.admin import register_admin, transaction
from jpushare.service.database_errors import URL_ERRORS, report_database_problem

LOG_FORMAT = "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser(
        "serve",
        help="run the service: the API and the dispatcher",
        description="Run JPU-Share: migrations, then the dispatcher loop and the REST API. "
        "Settings come from JPUSHARE_* variables (see jpushare.config).",
    )
    serve.add_argument("--no-api", action="store_true", help="run only the dispatcher")
    serve.add_argument("--no-dispatcher", action="store_true", help="run only the API")
    serve.add_argument(
        "--demo",
        action="store_true",
        help="on an empty database: load examples/cluster.yaml, create demo users and write "
        "their tokens to <state dir>/demo-tokens.env",
    )
    serve.add_argument("--host", help="listen address (default JPUSHARE_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default JPUSHARE_PORT or 8000)")
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="API worker processes (default 1); the dispatcher runs in the main process",
    )
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])
    serve.set_defaults(func=_serve)

    init = sub.add_parser(
        "init",
        help="load tiers, nodes and labs from a cluster file into the database",
        description="Create or update tiers, nodes with their GPUs, and labs (with their "
        "starting usage, for labs that do not exist yet) from a CLUSTER.yaml file. "
        "Idempotent.",
    )
    init.add_argument("--cluster", required=True, help="the cluster file (simulator format)")
    init.set_defaults(func=_init)

    register_admin(sub)

    backfill = sub.add_parser(
        "backfill",
        help="keep an LLM inference server on every idle or reserved GPU (local or Slurm)",
        description="Run the backfill keeper: JPUSHARE_BACKFILL_COMMAND on every GPU group "
        "no research job holds, stopped for a job before it starts; on Slurm as jobs of the "
        "backfill partition that research jobs preempt (README, LLM backfill).",
    )
    backfill.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])
    backfill.set_defaults(func=_backfill)


def _serve(args: argparse.Namespace) -> int:
    from jpushare.service.serve import ServeOptions, run_service, with_overrides

    logging.basicConfig(level=args.log_level, format=LOG_FORMAT)
    if args.no_api and args.no_dispatcher:
        print("jpushare serve: --no-api and --no-dispatcher leave nothing to run", file=sys.stderr)
        return 2
    if args.workers < 1 or (args.workers > 1 and args.no_api):
        print("jpushare serve: --workers must be at least 1 and needs the API", file=sys.stderr)
        return 2
    try:
        settings = with_overrides(load_settings(), args.host, args.port)
        options = ServeOptions(
            api=not args.no_api,
            dispatcher=not args.no_dispatcher,
            demo=args.demo,
            workers=args.workers,
        )
        return run_service(settings, options)
    except (ConfigError, ClusterFileError) as exc:
        print(f"jpushare serve: {exc}", file=sys.stderr)
        return 2
    except URL_ERRORS as exc:
        return report_database_problem(exc, "jpushare serve")


def _init(args: argparse.Namespace) -> int:
    from jpushare.formats.cluster_file import load_cluster
    from jpushare.store.cluster_setup import load_cluster_spec

    try:
        spec = load_cluster(args.cluster)
        with transaction() as s:
            done = load_cluster_spec(s, spec, store.utc_now())
    except (ConfigError, ClusterFileError, store.StoreError) as exc:
        print(f"jpushare init: {exc}", file=sys.stderr)
        return 2
    except URL_ERRORS as exc:
        return report_database_problem(exc, "jpushare init")
    print(f"tiers: {', '.join(done.tiers)}")
    print(
        f"nodes: {', '.join(done.nodes)} "
        f"(GPUs added {done.gpus_added}, removed {done.gpus_removed})"
    )
    if done.labs_created:
        print(f"labs created: {', '.join(done.labs_created)}")
    if done.labs_kept:
        print(f"labs kept as they are: {', '.join(done.labs_kept)}")
    return 0


def _backfill(args: argparse.Namespace) -> int:
    from jpushare.config import load_backfill_settings
    from jpushare.service.backfill import run_keeper

    logging.basicConfig(level=args.log_level, format=LOG_FORMAT)
    try:
        return run_keeper(load_settings(), load_backfill_settings())
    except ConfigError as exc:
        print(f"jpushare backfill: {exc}", file=sys.stderr)
        return 2
    except URL_ERRORS as exc:
        return report_database_problem(exc, "jpushare backfill")
