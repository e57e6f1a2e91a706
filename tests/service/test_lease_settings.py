"""JPUSHARE_LEASE_S: how long the dispatcher's lease lasts; default three cycles."""

from __future__ import annotations

import pytest

from jpushare.config import LEASE_CYCLES, ConfigError, load_settings


def test_the_lease_defaults_to_three_cycles_and_follows_the_cycle() -> None:
    assert load_settings({}).dispatcher_lease_s == LEASE_CYCLES * 5.0
    assert load_settings({"JPUSHARE_CYCLE_S": "2"}).dispatcher_lease_s == LEASE_CYCLES * 2.0


def test_a_lease_can_be_set() -> None:
    assert load_settings({"JPUSHARE_LEASE_S": "42.5"}).dispatcher_lease_s == 42.5


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("soon", "must be a number of seconds"),
        ("inf", "must be a finite number of seconds"),
        ("5", "must be longer than JPUSHARE_CYCLE_S"),  # one cycle: every renewal is late
        ("-1", "must be longer than JPUSHARE_CYCLE_S"),
        ("nan", "must be longer than JPUSHARE_CYCLE_S"),
    ],
)
def test_a_lease_not_longer_than_a_cycle_is_refused_with_the_setting_named(
    value: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        load_settings({"JPUSHARE_LEASE_S": value})
    assert "JPUSHARE_LEASE_S" in str(info.value)
