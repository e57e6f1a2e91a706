"""The notifier's settings (`JPUSHARE_SMTP_*`, `JPUSHARE_MAIL_*`, `JPUSHARE_NOTIFY_*`; the
README's settings table), read from the environment when `serve` starts.

Neither a relay nor a webhook set: no notifier runs, and jobs' mail requests are kept for
when one is.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from urllib.parse import urlsplit

from jpushare.config import ConfigError, env_number
from jpushare.mail_types import check_mail_address


@dataclass(frozen=True, slots=True)
class Retries:
    """How a delivery is tried again: `tries` in all, waiting backoff × 2^(tries so far - 1)
    between them, at most `backoff_max_s`; then it is given up (logged and counted)."""

    tries: int = 8
    backoff_s: float = 1.0
    backoff_max_s: float = 300.0

    def wait_before(self, attempt: int) -> float:
        """The wait before try `attempt` (2, 3, …)."""
        return float(min(self.backoff_max_s, self.backoff_s * 2 ** (attempt - 2)))


@dataclass(frozen=True, slots=True)
class SmtpSettings:
    host: str
    port: int = 25
    starttls: bool = False
    user: str | None = None
    password: str | None = None
    timeout_s: float = 30.0
    sender: str = "jpushare@localhost"
    domain: str | None = None  # a job without --mail-user mails <unix account>@domain


@dataclass(frozen=True, slots=True)
class NotifySettings:
    smtp: SmtpSettings | None = None
    webhook_url: str | None = None
    webhook_timeout_s: float = 10.0
    retries: Retries = Retries()
    poll_s: float = 2.0

    @property
    def enabled(self) -> bool:
        return self.smtp is not None or self.webhook_url is not None


def load_notify_settings(env: Mapping[str, str] | None = None) -> NotifySettings:
    """The settings of `env` (default: the process's); ConfigError names a bad one."""
    e = os.environ if env is None else env

    def text(name: str) -> str | None:
        return e.get(name, "").strip() or None

    number = partial(env_number, e)

    def whole(name: str, default: int, least: int, most: int) -> int:
        value = number(name, default, least, most)
        if value != int(value):
            raise ConfigError(f"{name} must be a whole number, not {value:g}")
        return int(value)

    def flag(name: str) -> bool:
        raw = (text(name) or "no").lower()
        if raw not in ("yes", "no", "true", "false", "1", "0"):
            raise ConfigError(f"{name} must be yes or no, not {raw!r}")
        return raw in ("yes", "true", "1")

    smtp: SmtpSettings | None = None
    host = text("JPUSHARE_SMTP_HOST")
    if host is not None:
        sender = text("JPUSHARE_MAIL_FROM") or f"jpushare@{socket.getfqdn()}"
        domain = text("JPUSHARE_MAIL_DOMAIN")
        try:
            check_mail_address(sender)
            if domain is not None:
                check_mail_address(f"user@{domain}")
        except ValueError:
            raise ConfigError(
                f"JPUSHARE_MAIL_FROM ({sender!r}) must be one address and JPUSHARE_MAIL_DOMAIN "
                f"({domain!r}) a domain such as example.org"
            ) from None
        user, password = text("JPUSHARE_SMTP_USER"), e.get("JPUSHARE_SMTP_PASSWORD") or None
        if (user is None) != (password is None):
            raise ConfigError("JPUSHARE_SMTP_USER and JPUSHARE_SMTP_PASSWORD go together")
        smtp = SmtpSettings(
            host=host,
            port=whole("JPUSHARE_SMTP_PORT", 25, 1, 65535),
            starttls=flag("JPUSHARE_SMTP_STARTTLS"),
            user=user,
            password=password,
            timeout_s=number("JPUSHARE_SMTP_TIMEOUT_S", 30.0, 0.1, 600.0),
            sender=sender,
            domain=domain,
        )
    url = text("JPUSHARE_NOTIFY_URL")
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"JPUSHARE_NOTIFY_URL must be an http(s) URL, not {url!r}")
    backoff = number("JPUSHARE_NOTIFY_BACKOFF_S", 1.0, 0.0, 3600.0)
    backoff_max = number("JPUSHARE_NOTIFY_BACKOFF_MAX_S", 300.0, 0.0, 86400.0)
    return NotifySettings(
        smtp=smtp,
        webhook_url=url,
        webhook_timeout_s=number("JPUSHARE_NOTIFY_TIMEOUT_S", 10.0, 0.1, 600.0),
        retries=Retries(
            tries=whole("JPUSHARE_NOTIFY_TRIES", 8, 1, 100),
            backoff_s=backoff,
            backoff_max_s=max(backoff, backoff_max),
        ),
        poll_s=number("JPUSHARE_NOTIFY_POLL_S", 2.0, 0.05, 3600.0),
    )
