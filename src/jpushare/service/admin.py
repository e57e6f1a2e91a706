"""`jpushare admin …`: labs, users, tokens, nodes and tiers, straight on the database.

Server-side commands for the operator (the same machine or credentials as the service):
they use `JPUSHARE_DATABASE_URL` (else the SQLite file in the state dir), bring the schema
up to date first, and run each change in one transaction. A printed token is shown once:
only its hash is stored.
"""

from __future__ import annotations

import argparse
import math
import os
import pwd
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from jpushare import store
from jpushare.client.formatting import ago, amount, table, yes_no
from jpushare.config import ConfigError, load_settings
from jpushare.memory_sizes import format_mem_mb, parse_mem_mb
from jpushare.service.database_errors import URL_ERRORS, report_database_problem
from jpushare.store.lab_events import lab_events, non_finite_usage, set_lab_usage_recorded
from jpushare.unix_accounts import UnknownAccount, resolve_account


@contextmanager
def transaction() -> Iterator[Session]:
    """One transaction on the configured database (migrated to the newest schema)."""
    settings = load_settings()
    store.upgrade(settings.database_url)
    engine = store.make_engine(settings.database_url)
    try:
        with store.make_sessionmaker(engine).begin() as session:
            yield session
    finally:
        engine.dispose()


def _lab_add(args: argparse.Namespace) -> int:
    with transaction() as s:
        lab = store.create_lab(s, args.name, store.utc_now())
        if args.usage:
            set_lab_usage_recorded(
                s, lab.name, args.usage, store.utc_now(), actor=_operator(), note="lab add --usage"
            )
    print(f"lab {lab.name} created (usage {amount(args.usage)} TFLOP-s)")
    return 0


def _lab_list(args: argparse.Namespace) -> int:
    with transaction() as s:
        labs = store.list_labs(s)
    now = datetime.now(UTC)
    rows = [
        (rank, lab.name, amount(lab.cumulative_usage), ago(lab.created_at.isoformat(), now))
        for rank, lab in enumerate(labs, start=1)
    ]
    print(table(["RANK", "LAB", "USAGE (TFLOP-s)", "CREATED"], rows))
    return 0


def _lab_set_usage(args: argparse.Namespace) -> int:
    with transaction() as s:
        done = set_lab_usage_recorded(
            s, args.lab, args.value, store.utc_now(), actor=_operator(), note=args.note
        )
    print(
        f"lab {done.lab}: usage {amount(done.before_tflop_s)} -> {amount(done.after_tflop_s)} "
        f"TFLOP-s (recorded as lab event {done.event_id}; `jpushare admin lab events` lists them)"
    )
    return 0


def _lab_events(args: argparse.Namespace) -> int:
    with transaction() as s:
        events = lab_events(s, args.lab)
    now = datetime.now(UTC)
    rows = [
        (
            e.id,
            e.lab,
            ago(e.at.isoformat(), now),
            e.kind,
            e.actor,
            amount((e.detail or {}).get("before", 0.0)),
            amount((e.detail or {}).get("after", 0.0)),
            (e.detail or {}).get("note") or "-",
        )
        for e in events
    ]
    print(table(["ID", "LAB", "AT", "KIND", "BY", "BEFORE", "AFTER", "NOTE"], rows))
    return 0


def _operator() -> str:
    """Who ran the admin command: the Unix account (the admin commands need the database's
    credentials, so the account is who is accountable)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid {os.getuid()}"


def _usage_value(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of TFLOP-s: {raw!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(non_finite_usage(repr(raw), value))
    if value < 0:
        raise argparse.ArgumentTypeError(f"a lab's usage is never negative: {raw!r}")
    if value > MAX_USAGE_TFLOP_S:
        raise argparse.ArgumentTypeError(f"at most {MAX_USAGE_TFLOP_S:g} TFLOP-seconds: {raw!r}")
    return value


class RootAccount(ValueError):
    """A user would be mapped to an account with uid 0 without `--allow-root`."""


def _user_add(args: argparse.Namespace) -> int:
    now = store.utc_now()
    with transaction() as s:
        user = store.create_user(s, args.name, args.lab, args.role, now, args.unix_user)
        # After the store's checks (lab, name); raising rolls the insert back.
        account = resolve_account(user.unix_user)
        if account.uid == 0 and not args.allow_root:
            raise RootAccount(
                f"the Unix account {account.name} has uid 0: {user.name}'s jobs would run as "
                "root; give the user their own account with --unix-user, or pass "
                "--allow-root if that is really meant (nothing was changed)"
            )
        issued = store.issue_token(s, user.id, now, label=args.label)
    print(
        f"user {user.name} created in lab {user.lab_name} as {user.role}; "
        f"jobs run as {account.name} (uid {account.uid})"
    )
    print(f"token (id {issued.token.id}, shown once): {issued.secret}")
    return 0


def _user_list(args: argparse.Namespace) -> int:
    with transaction() as s:
        users = store.list_users(s, args.lab)
    rows = [(u.name, u.lab_name, u.role, u.unix_user) for u in users]
    print(table(["USER", "LAB", "ROLE", "UNIX-USER"], rows))
    return 0


def _token_issue(args: argparse.Namespace) -> int:
    with transaction() as s:
        user = store.get_user(s, args.user)
        issued = store.issue_token(s, user.id, store.utc_now(), label=args.label)
    print(f"token for {user.name} (id {issued.token.id}, shown once): {issued.secret}")
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    with transaction() as s:
        changed = store.revoke_token(s, args.id, store.utc_now())
    print(f"token {args.id} revoked" if changed else f"token {args.id} was already revoked")
    return 0


def _token_list(args: argparse.Namespace) -> int:
    with transaction() as s:
        user_id = store.get_user(s, args.user).id if args.user else None
        names = {u.id: u.name for u in store.list_users(s)}
        tokens = store.list_tokens(s, user_id)
    now = datetime.now(UTC)
    rows = [
        (
            t.id,
            names.get(t.user_id, t.user_id),
            t.label or "-",
            ago(t.created_at.isoformat(), now),
            ago(t.revoked_at.isoformat(), now) if t.revoked_at else "-",
        )
        for t in tokens
    ]
    print(table(["ID", "USER", "LABEL", "CREATED", "REVOKED"], rows))
    return 0


def _node_drain(args: argparse.Namespace) -> int:
    with transaction() as s:
        store.drain_node(s, args.node, args.reason, store.utc_now())
    print(f"node {args.node} drained: no new jobs or reservations there (R5)")
    return 0


def _node_undrain(args: argparse.Namespace) -> int:
    with transaction() as s:
        store.undrain_node(s, args.node, store.utc_now())
    print(f"node {args.node} open again")
    return 0


def _node_remove(args: argparse.Namespace) -> int:
    with transaction() as s:
        store.remove_node(s, args.node)
    print(
        f"node {args.node} removed from the inventory (an executor that still reports it "
        "brings it back at the next cycle: drain it to keep jobs off it)"
    )
    return 0


def _node_list(args: argparse.Namespace) -> int:
    with transaction() as s:
        nodes = store.list_nodes(s)
    rows = [
        (
            n.name,
            n.state,
            f"drained: {n.drain_reason}" if n.admin_drained else None,
            ", ".join(f"{t} x{c}" for t, c in sorted(n.gpus.items())),
        )
        for n in nodes
    ]
    print(table(["NODE", "STATE", "ADMIN", "GPUS"], rows))
    return 0


def _tier_set(args: argparse.Namespace) -> int:
    with transaction() as s:
        try:
            current: store.TierRecord | None = store.get_tier(s, args.name)
        except store.NotFound:
            current = None
        if current is None:
            if args.tflops is None or args.sort_order is None:
                raise store.InvalidRequest(
                    f"new tier {args.name}: --tflops and --sort-order are needed"
                )
            tier = store.upsert_tier(
                s,
                args.name,
                args.tflops,
                args.sort_order,
                max_gpus=8 if args.max_gpus is None else args.max_gpus,
                auto_assign=True if args.auto_assign is None else args.auto_assign,
                partition=args.partition,
                cpus_per_gpu=args.cpus_per_gpu,
                mem_per_gpu_mb=args.mem_per_gpu,
            )
        else:
            tier = store.upsert_tier(
                s,
                args.name,
                current.tflops if args.tflops is None else args.tflops,
                current.sort_order if args.sort_order is None else args.sort_order,
                max_gpus=current.max_gpus if args.max_gpus is None else args.max_gpus,
                auto_assign=current.auto_assign if args.auto_assign is None else args.auto_assign,
                partition=current.partition if args.partition is None else args.partition,
                cpus_per_gpu=_keep_or(current.cpus_per_gpu, args.cpus_per_gpu),
                mem_per_gpu_mb=_keep_or(current.mem_per_gpu_mb, args.mem_per_gpu),
            )
    print(
        f"tier {tier.name}: {tier.tflops:g} TFLOPS, sort order {tier.sort_order}, "
        f"max {tier.max_gpus} GPUs per job, auto-assign {'yes' if tier.auto_assign else 'no'}, "
        f"partition {tier.partition or '-'}, per GPU {_per_gpu(tier)}"
    )
    return 0


def _keep_or(current: int | None, given: int | None) -> int | None:
    """An option not given keeps the current value; 0 (`none`) clears it."""
    if given is None:
        return current
    return None if given == 0 else given


def _per_gpu(tier: store.TierRecord) -> str:
    cpus = "-" if tier.cpus_per_gpu is None else f"{tier.cpus_per_gpu} CPUs"
    mem = "-" if tier.mem_per_gpu_mb is None else format_mem_mb(tier.mem_per_gpu_mb)
    return f"{cpus}, {mem}"


# A negative usage would rank the lab first for ever (SPEC §4: usage only grows).
MAX_USAGE_TFLOP_S = 1e18


def _cpus_arg(raw: str) -> int:
    if raw.strip().lower() == "none":
        return 0
    try:
        return int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a CPU count: {raw!r}") from None


def _mem_arg(raw: str) -> int:
    if raw.strip().lower() == "none":
        return 0
    try:
        return parse_mem_mb(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _tier_list(args: argparse.Namespace) -> int:
    with transaction() as s:
        tiers = store.list_tiers(s)
    rows = [
        (
            t.name,
            t.tflops,
            t.sort_order,
            t.max_gpus,
            yes_no(t.auto_assign),
            t.partition,
            t.cpus_per_gpu,
            None if t.mem_per_gpu_mb is None else format_mem_mb(t.mem_per_gpu_mb),
        )
        for t in tiers
    ]
    headers = ["TIER", "TFLOPS", "ORDER", "MAX-GPUS", "AUTO", "PARTITION"]
    print(table([*headers, "CPUS/GPU", "MEM/GPU"], rows))
    return 0


def _guarded(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Store errors become one line on stderr and exit code 1; an unknown Unix account, a
    root account without --allow-root, a bad setting or a database URL that cannot be used
    exit code 2 (nothing was changed)."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except store.StoreError as exc:
            print(f"jpushare admin: {exc}", file=sys.stderr)
            return 1
        except (UnknownAccount, ConfigError, RootAccount) as exc:
            print(f"jpushare admin: {exc}", file=sys.stderr)
            return 2
        except URL_ERRORS as exc:
            return report_database_problem(exc, "jpushare admin")

    return run


def register_admin(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`admin lab|user|token|node|tier …`."""
    admin = sub.add_parser(
        "admin", help="manage labs, users, tokens, nodes and tiers (server side)"
    )
    areas = admin.add_subparsers(dest="area", required=True, metavar="AREA")

    def command(
        parent: argparse._SubParsersAction[argparse.ArgumentParser],
        name: str,
        handler: Callable[[argparse.Namespace], int],
        help_text: str,
    ) -> argparse.ArgumentParser:
        p = parent.add_parser(name, help=help_text)
        p.set_defaults(func=_guarded(handler))
        return p

    lab = areas.add_parser("lab", help="labs").add_subparsers(dest="action", required=True)
    p = command(lab, "add", _lab_add, "create a lab")
    p.add_argument("name")
    p.add_argument("--usage", type=_usage_value, default=0.0, help="starting usage, TFLOP-seconds")
    command(lab, "list", _lab_list, "list labs, least usage first")
    p = command(lab, "set-usage", _lab_set_usage, "set a lab's usage (recorded as a lab event)")
    p.add_argument("lab")
    p.add_argument("value", type=_usage_value, metavar="VALUE", help="TFLOP-seconds, >= 0")
    p.add_argument("--note", default="", help="why (kept with the event)")
    p = command(lab, "events", _lab_events, "changes made to labs' usage by hand")
    p.add_argument("--lab")

    user = areas.add_parser("user", help="users").add_subparsers(dest="action", required=True)
    p = command(user, "add", _user_add, "create a user and print a token")
    p.add_argument("name")
    p.add_argument("--lab", required=True)
    p.add_argument("--role", choices=[r.value for r in store.Role], default="student")
    p.add_argument(
        "--unix-user",
        metavar="ACCOUNT",
        help="the Unix account the user's jobs run as and MUNGE sign-in maps to (default: "
        "NAME); it must exist on this host",
    )
    p.add_argument(
        "--allow-root",
        action="store_true",
        help="let the account have uid 0 (root): refused without it, since the user's jobs "
        "would run as root",
    )
    p.add_argument("--label", default="", help="a note on the token")
    p = command(user, "list", _user_list, "list users")
    p.add_argument("--lab")

    token = areas.add_parser("token", help="API tokens").add_subparsers(
        dest="action", required=True
    )
    p = command(token, "issue", _token_issue, "issue a new token for a user and print it")
    p.add_argument("user")
    p.add_argument("--label", default="")
    p = command(token, "revoke", _token_revoke, "revoke a token by id")
    p.add_argument("id", type=int)
    p = command(token, "list", _token_list, "list tokens (never their secrets)")
    p.add_argument("--user")

    node = areas.add_parser("node", help="nodes").add_subparsers(dest="action", required=True)
    p = command(node, "drain", _node_drain, "close a node to new jobs and reservations")
    p.add_argument("node")
    p.add_argument("--reason", default="drained by an admin")
    p = command(node, "undrain", _node_undrain, "open a drained node again")
    p.add_argument("node")
    p = command(node, "remove", _node_remove, "take a node and its GPUs out of the inventory")
    p.add_argument("node")
    command(node, "list", _node_list, "list nodes with their GPUs")

    tier = areas.add_parser("tier", help="GPU tiers").add_subparsers(dest="action", required=True)
    p = command(tier, "set", _tier_set, "create a tier or change its fields")
    p.add_argument("name")
    p.add_argument("--tflops", type=float)
    p.add_argument("--sort-order", type=int)
    p.add_argument("--max-gpus", type=int)
    p.add_argument("--auto-assign", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--partition")
    p.add_argument(
        "--cpus-per-gpu", type=_cpus_arg, help="default CPUs per GPU of its jobs ('none': no limit)"
    )
    p.add_argument(
        "--mem-per-gpu",
        type=_mem_arg,
        metavar="SIZE",
        help="default memory per GPU of its jobs, e.g. 32G ('none': no limit)",
    )
    command(tier, "list", _tier_list, "list tiers, strongest first")
