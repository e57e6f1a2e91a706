"""JPUSHARE_BACKFILL_*: defaults, and a bad value is a ConfigError naming the setting."""

from __future__ import annotations

import pytest

from jpushare.config import ConfigError, load_backfill_settings

CMD = {"JPUSHARE_BACKFILL_COMMAND": "vllm serve m --port {port} # {node} {gpus}"}


def test_defaults() -> None:
    s = load_backfill_settings(CMD)
    assert (s.gpus_per_server, s.grace_s, s.port_base, s.backoff_s) == (1, 30.0, 8100, 10.0)


def test_the_settings_are_read() -> None:
    s = load_backfill_settings(
        CMD
        | {
            "JPUSHARE_BACKFILL_GPUS_PER_SERVER": "2",
            "JPUSHARE_BACKFILL_GRACE_S": "5",
            "JPUSHARE_BACKFILL_PORT_BASE": "9000",
        }
    )
    assert (s.gpus_per_server, s.grace_s, s.port_base) == (2, 5.0, 9000)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({}, "JPUSHARE_BACKFILL_COMMAND"),
        ({"JPUSHARE_BACKFILL_COMMAND": "serve --model {model}"}, "JPUSHARE_BACKFILL_COMMAND"),
        (CMD | {"JPUSHARE_BACKFILL_GPUS_PER_SERVER": "0"}, "JPUSHARE_BACKFILL_GPUS_PER_SERVER"),
        (CMD | {"JPUSHARE_BACKFILL_GPUS_PER_SERVER": "1.5"}, "JPUSHARE_BACKFILL_GPUS_PER_SERVER"),
        (CMD | {"JPUSHARE_BACKFILL_GRACE_S": "soon"}, "JPUSHARE_BACKFILL_GRACE_S"),
        (CMD | {"JPUSHARE_BACKFILL_GRACE_S": "nan"}, "JPUSHARE_BACKFILL_GRACE_S"),
        (CMD | {"JPUSHARE_BACKFILL_PORT_BASE": "80"}, "JPUSHARE_BACKFILL_PORT_BASE"),
    ],
)
def test_a_bad_value_names_its_setting(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        load_backfill_settings(env)
