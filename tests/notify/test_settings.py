"""The notifier's settings: nothing set, nothing runs; each bad value is named."""

from __future__ import annotations

import pytest

from jpushare.config import ConfigError
from jpushare.notify.settings import Retries, load_notify_settings


def test_nothing_set_is_no_notifier() -> None:
    assert not load_notify_settings({}).enabled


def test_a_relay_and_a_webhook() -> None:
    s = load_notify_settings(
        {
            "JPUSHARE_SMTP_HOST": "mail.uni.edu",
            "JPUSHARE_SMTP_PORT": "587",
            "JPUSHARE_SMTP_STARTTLS": "yes",
            "JPUSHARE_SMTP_USER": "jps",
            "JPUSHARE_SMTP_PASSWORD": "secret",
            "JPUSHARE_MAIL_DOMAIN": "uni.edu",
            "JPUSHARE_MAIL_FROM": "gpu@uni.edu",
            "JPUSHARE_NOTIFY_URL": "https://ops.uni.edu/hook?key=1",
            "JPUSHARE_NOTIFY_TRIES": "3",
            "JPUSHARE_NOTIFY_BACKOFF_S": "2",
        }
    )
    assert s.smtp is not None and s.enabled
    assert (s.smtp.host, s.smtp.port, s.smtp.starttls) == ("mail.uni.edu", 587, True)
    assert (s.smtp.user, s.smtp.password) == ("jps", "secret")
    assert (s.smtp.domain, s.smtp.sender) == ("uni.edu", "gpu@uni.edu")
    assert s.webhook_url == "https://ops.uni.edu/hook?key=1"
    assert s.retries == Retries(tries=3, backoff_s=2.0, backoff_max_s=300.0)


def test_backoff_doubles_up_to_its_max() -> None:
    r = Retries(tries=6, backoff_s=1.0, backoff_max_s=5.0)
    assert [r.wait_before(n) for n in range(2, 7)] == [1.0, 2.0, 4.0, 5.0, 5.0]


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"JPUSHARE_SMTP_HOST": "m", "JPUSHARE_SMTP_PORT": "0"}, "JPUSHARE_SMTP_PORT"),
        ({"JPUSHARE_SMTP_HOST": "m", "JPUSHARE_SMTP_STARTTLS": "maybe"}, "STARTTLS"),
        ({"JPUSHARE_SMTP_HOST": "m", "JPUSHARE_SMTP_USER": "u"}, "JPUSHARE_SMTP_PASSWORD"),
        ({"JPUSHARE_SMTP_HOST": "m", "JPUSHARE_MAIL_DOMAIN": "a b"}, "JPUSHARE_MAIL_DOMAIN"),
        ({"JPUSHARE_NOTIFY_URL": "ftp://x/"}, "JPUSHARE_NOTIFY_URL"),
        ({"JPUSHARE_NOTIFY_URL": "http://x/", "JPUSHARE_NOTIFY_TRIES": "0"}, "TRIES"),
    ],
)
def test_a_bad_setting_is_named(env: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        load_notify_settings(env)
