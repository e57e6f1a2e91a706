"""Labs, users and bearer tokens: the secret is shown once and only its hash is stored."""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import text

from jpushare import store
from tests.store.conftest import T0, World, at


def test_a_token_authenticates_its_user_until_revoked(world: World) -> None:
    with world.sessions.begin() as s:
        issued = store.issue_token(s, world.alice.id, T0, label="laptop")
    assert issued.secret.startswith("jps_") and len(issued.secret) > 40
    with world.sessions.begin() as s:
        user = store.authenticate(s, issued.secret)
        assert user == world.alice
        assert store.authenticate(s, issued.secret + "x") is None
        assert store.authenticate(s, "not-a-token") is None
        assert store.revoke_token(s, issued.token.id, at(60)) is True
        assert store.revoke_token(s, issued.token.id, at(61)) is False  # idempotent
    with world.sessions.begin() as s:
        assert store.authenticate(s, issued.secret) is None
        [token] = store.list_tokens(s, world.alice.id)
        assert token.revoked_at == at(60)


def test_only_the_sha256_of_the_secret_is_stored(world: World) -> None:
    with world.sessions.begin() as s:
        issued = store.issue_token(s, world.bob.id, T0)
    with world.sessions() as s:
        stored = s.execute(text("SELECT * FROM api_tokens")).all()
    flat = " ".join(str(v) for row in stored for v in row)
    assert issued.secret not in flat
    assert hashlib.sha256(issued.secret.encode()).hexdigest() in flat


def test_two_tokens_of_one_user_are_independent(world: World) -> None:
    with world.sessions.begin() as s:
        first = store.issue_token(s, world.root.id, T0)
        second = store.issue_token(s, world.root.id, T0)
        store.revoke_token(s, first.token.id, T0)
        assert store.authenticate(s, first.secret) is None
        assert store.authenticate(s, second.secret) == world.root


def test_names_are_unique_and_roles_checked(world: World) -> None:
    with world.sessions.begin() as s:
        with pytest.raises(store.AlreadyExists):
            store.create_lab(s, "alpha", T0)
        with pytest.raises(store.AlreadyExists):
            store.create_user(s, "alice", "beta", "pi", T0)
        with pytest.raises(store.InvalidRequest):
            store.create_user(s, "carol", "beta", "root", T0)
        with pytest.raises(store.NotFound):
            store.create_user(s, "carol", "gamma", "pi", T0)
        with pytest.raises(store.NotFound):
            store.issue_token(s, 999, T0)
        with pytest.raises(store.NotFound):
            store.revoke_token(s, 999, T0)


def test_labs_and_users_read_back(world: World) -> None:
    with world.sessions.begin() as s:
        assert [lab.name for lab in store.list_labs(s)] == ["alpha", "beta"]
        assert store.get_lab(s, "beta").cumulative_usage == 0.0
        assert [u.name for u in store.list_users(s, lab="alpha")] == ["alice", "root"]
        assert store.get_user(s, "bob") == world.bob
        assert store.get_user_by_id(s, world.root.id).role == "admin"
