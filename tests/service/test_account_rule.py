"""A service that is not root serves one Unix account only; `--demo` (`make run`) points
its users at the service's account, so it starts as any user.

The tests run as root (they create the accounts); "a service running as account A" is
this process with `os.geteuid` answering A's uid: every check reads the account through
`os.geteuid` and the real account database (`pwd`).
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.config import ConfigError
from jpushare.formats.cluster_file import load_cluster
from jpushare.service.__main__ import main
from jpushare.service.account_rule import check_service_account
from jpushare.service.demo import ADMIN_USER, prepare_demo, user_name
from tests.dispatcher.conftest import CLUSTER_YAML
from tests.unix_accounts import make_accounts, require_root_and_munge


@pytest.fixture
def accounts() -> Iterator[list[str]]:
    require_root_and_munge()
    with make_accounts(2) as names:
        yield names


def run_as(monkeypatch: pytest.MonkeyPatch, account: str) -> None:
    uid = pwd.getpwnam(account).pw_uid
    monkeypatch.setattr(os, "geteuid", lambda: uid)


def add_users(sessions: sessionmaker[Session], **unix_users: str) -> None:
    with sessions.begin() as s:
        if not store.list_labs(s):
            store.create_lab(s, "alpha", store.utc_now())
        for name, account in unix_users.items():
            store.create_user(s, name, "alpha", "student", store.utc_now(), unix_user=account)


def test_a_service_that_is_not_root_refuses_users_of_other_accounts(
    sessions: sessionmaker[Session], accounts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = accounts
    add_users(sessions, ann=a, ada=a)
    run_as(monkeypatch, a)
    # every user is the service's account: it starts, and its API serves that account only
    assert check_service_account(sessions, "local") == a
    add_users(sessions, ben=b)
    with pytest.raises(ConfigError) as exc:
        check_service_account(sessions, "local")
    message = str(exc.value)
    assert f"runs as the Unix account {a}, not root" in message
    assert f"ben as {b}" in message and "ann" not in message
    monkeypatch.undo()  # root serves every account
    assert check_service_account(sessions, "local") is None


def test_serve_says_so_in_one_line_and_exits_2(
    db_url: str,
    accounts: list[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = accounts
    engine = store.make_engine(db_url)
    add_users(store.make_sessionmaker(engine), ben=b)
    engine.dispose()
    monkeypatch.setenv("JPUSHARE_DATABASE_URL", db_url)
    monkeypatch.setenv("JPUSHARE_STATE_DIR", str(tmp_path / "var"))
    run_as(monkeypatch, a)
    # Only the uid is faked: the state and database files are really root's, which the
    # ownership check (tests/security/test_state_ownership.py) would refuse first.
    monkeypatch.setattr("jpushare.service.serve.check_state_is_ours", lambda settings: None)
    code = main(["serve", "--no-dispatcher", "--port", "9"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("jpushare serve: this service runs as")


def test_demo_users_are_the_account_that_runs_the_service(
    sessions: sessionmaker[Session],
    accounts: list[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    a, b = accounts
    (tmp_path / "cluster.yaml").write_text(CLUSTER_YAML)
    spec = load_cluster(tmp_path / "cluster.yaml")
    run_as(monkeypatch, a)
    demo = prepare_demo(sessions, spec, tmp_path / "var", "http://127.0.0.1:8000")
    assert demo.initialised and demo.users
    with sessions() as s:
        assert {u.name: u.unix_user for u in store.list_users(s)} == {
            **{user_name(lab): a for lab in ("alpha", "beta")},
            ADMIN_USER: a,
        }
    check_service_account(sessions, "local")
    # The same demo database started by another account (or made before users were
    # accounts, when they mapped to their names): its demo users follow the service.
    run_as(monkeypatch, b)
    again = prepare_demo(sessions, spec, tmp_path / "var", "http://127.0.0.1:8000")
    assert not again.initialised and again.users == ()  # the tokens file is kept
    with sessions() as s:
        assert {u.unix_user for u in store.list_users(s)} == {b}
    check_service_account(sessions, "local")
