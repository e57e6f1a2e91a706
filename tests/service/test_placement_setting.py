"""JPUSHARE_PLACEMENT: read with the other settings; a bad value stops `serve` before it
starts anything, with one line naming the valid choices."""

from __future__ import annotations

from pathlib import Path

import pytest

from jpushare.cli import main
from jpushare.config import ConfigError, load_settings
from jpushare.policy import PlacementOrder


def test_pack_is_the_default_and_spread_can_be_chosen() -> None:
    assert load_settings({}).placement_order is PlacementOrder.PACK
    assert load_settings({"JPUSHARE_PLACEMENT": ""}).placement_order is PlacementOrder.PACK
    assert load_settings({"JPUSHARE_PLACEMENT": "spread"}).placement_order is PlacementOrder.SPREAD
    assert load_settings({"JPUSHARE_PLACEMENT": " PACK "}).placement_order is PlacementOrder.PACK


def test_a_bad_value_names_the_setting_and_the_choices() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"JPUSHARE_PLACEMENT": "best-fit"})
    assert str(info.value) == "JPUSHARE_PLACEMENT must be one of pack, spread, not 'best-fit'"


def test_serve_refuses_to_start_with_a_bad_placement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "var"
    monkeypatch.setenv("JPUSHARE_STATE_DIR", str(state))
    monkeypatch.setenv("JPUSHARE_PLACEMENT", "tight")

    assert main(["serve", "--port", "1"]) == 2

    err = capsys.readouterr().err
    assert err == "jpushare serve: JPUSHARE_PLACEMENT must be one of pack, spread, not 'tight'\n"
    assert not state.exists(), "nothing was created: no database, no executor state"
