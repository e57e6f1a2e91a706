"""JPUSHARE_POLICY: the policy the dispatcher runs, by its simulator name; a bad value stops
`serve` before it starts anything, with one line naming the valid choices."""

from __future__ import annotations

from pathlib import Path

import pytest

from jpushare.cli import main
from jpushare.config import ConfigError, load_settings
from jpushare.policy.peers import POLICIES


def test_the_reservation_policy_is_the_default_and_a_peer_can_be_chosen() -> None:
    assert load_settings({}).policy == "reservation"
    assert load_settings({"JPUSHARE_POLICY": ""}).policy == "reservation"
    assert load_settings({"JPUSHARE_POLICY": "fifo"}).policy == "fifo"
    assert load_settings({"JPUSHARE_POLICY": " Hol-Skip "}).policy == "hol-skip"
    assert {load_settings({"JPUSHARE_POLICY": name}).policy for name in POLICIES} == set(POLICIES)


def test_a_bad_value_names_the_setting_and_the_choices() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"JPUSHARE_POLICY": "easy"})
    assert str(info.value) == (
        "JPUSHARE_POLICY must be one of reservation, hol-skip, fifo, backfill, not 'easy'"
    )


def test_serve_refuses_to_start_with_a_bad_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "var"
    monkeypatch.setenv("JPUSHARE_STATE_DIR", str(state))
    monkeypatch.setenv("JPUSHARE_POLICY", "sjf")

    assert main(["serve", "--port", "1"]) == 2

    err = capsys.readouterr().err
    assert err == (
        "jpushare serve: JPUSHARE_POLICY must be one of reservation, hol-skip, fifo, "
        "backfill, not 'sjf'\n"
    )
    assert not state.exists(), "nothing was created: no database, no executor state"
