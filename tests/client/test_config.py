"""Where the client finds its URL and token, and how its tables look."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from jpushare.client import ApiError, Client, ClientConfig, load_client_config
from jpushare.client.config import DEFAULT_URL, ClientConfigError
from jpushare.client.formatting import ago, amount, table


def pair(config: ClientConfig) -> tuple[str, str | None]:
    return config.url, config.token


def test_flags_beat_environment_beat_the_file(tmp_path: Path) -> None:
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"url": "http://file:1", "token": "jps_file"}))
    env = {"JPUSHARE_CLIENT_CONFIG": str(f)}
    assert pair(load_client_config(env=env)) == ("http://file:1", "jps_file")
    env |= {"JPUSHARE_URL": "http://env:2", "JPUSHARE_TOKEN": "jps_env"}
    assert pair(load_client_config(env=env)) == ("http://env:2", "jps_env")
    assert pair(load_client_config("http://flag:3", "jps_flag", env=env)) == (
        "http://flag:3",
        "jps_flag",
    )


def test_the_default_file_is_under_xdg_config_home(tmp_path: Path) -> None:
    (tmp_path / "jpushare").mkdir()
    (tmp_path / "jpushare" / "client.json").write_text('{"token": "jps_xdg"}')
    config = load_client_config(env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert (config.url, config.token) == (DEFAULT_URL, "jps_xdg")
    assert load_client_config(env={"XDG_CONFIG_HOME": str(tmp_path / "none")}).token is None


@pytest.mark.parametrize("content", ["{not json", "[1]", '{"token": 5}'])
def test_a_broken_file_is_a_clear_error(tmp_path: Path, content: str) -> None:
    f = tmp_path / "c.json"
    f.write_text(content)
    with pytest.raises(ClientConfigError, match=str(f)):
        load_client_config(env={"JPUSHARE_CLIENT_CONFIG": str(f)})


def test_tables_align_and_times_are_relative() -> None:
    assert table(("ID", "NAME"), [(1, "a"), (123, "bcd")]).splitlines() == [
        " ID  NAME",
        "  1  a",
        "123  bcd",
    ]
    now = datetime(2026, 1, 5, 9, 0, 0, tzinfo=UTC)
    assert ago("2026-01-05T08:57:00Z", now) == "3m ago"
    assert ago("2026-01-05T08:59:58Z", now) == "2s ago"
    assert ago("2026-01-05T06:30:00Z", now) == "2h30m ago"
    assert ago("2026-01-03T08:00:00Z", now) == "2d1h ago"
    assert ago(None, now) == "-"
    assert (amount(0), amount(950.4), amount(12_345), amount(4.56e6)) == (
        "0",
        "950",
        "12,345",
        "4,560,000",
    )


def test_a_non_json_error_is_bad_response() -> None:
    transport = httpx.MockTransport(lambda _r: httpx.Response(502, text="<html>proxy</html>"))
    with Client("http://x", "jps_t", transport=transport) as api, pytest.raises(ApiError) as exc:
        api.queue()
    assert exc.value.code == "BAD_RESPONSE" and exc.value.status == 502


def test_only_a_direct_plain_http_api_skips_the_tls_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jpushare.client.api import _plain_http_without_proxy

    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert _plain_http_without_proxy("http://head:8000")
    assert not _plain_http_without_proxy("https://head:8000")  # TLS: httpx's verified default
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    assert not _plain_http_without_proxy("http://head:8000")  # the proxy is honoured
