"""The two ways out: one mail through the operator's SMTP relay, one JSON POST to the
operator's webhook. Each sends once and says whether a failure is worth another try
(`Undeliverable.retry`); `delivery.deliver` does the trying again.
"""

from __future__ import annotations

import json
import smtplib
import ssl
import urllib.error
import urllib.request
from email import policy
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

from jpushare.notify.messages import Mail
from jpushare.notify.settings import SmtpSettings

# Headers unfolded up to RFC 5322's line limit: a subject stays one line, as Slurm's, for
# the mail filters and scripts that read it.
_POLICY = policy.SMTP.clone(max_line_length=998)


class Undeliverable(Exception):
    """One try failed; `retry`: whether another might succeed (a 4xx SMTP answer, a dead
    relay or webhook, a 5xx or 429 HTTP answer) or not (a refused address, a 4xx HTTP
    answer)."""

    def __init__(self, message: str, *, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


def send_mail(smtp: SmtpSettings, mail: Mail) -> None:
    """Send `mail` through the relay, a connection of its own; Undeliverable if not."""
    message = EmailMessage(policy=_POLICY)
    message["From"] = smtp.sender
    message["To"] = mail.to
    message["Subject"] = mail.subject
    message["Date"] = formatdate(localtime=False, usegmt=True)
    message["Message-ID"] = make_msgid(domain=smtp.sender.rpartition("@")[2] or None)
    message["X-JPU-Share-Mail-Type"] = mail.mail_type.value
    message.set_content(mail.body)
    try:
        with smtplib.SMTP(smtp.host, smtp.port, timeout=smtp.timeout_s) as relay:
            if smtp.starttls:
                relay.starttls(context=ssl.create_default_context())
            if smtp.user is not None and smtp.password is not None:
                relay.login(smtp.user, smtp.password)
            relay.send_message(message)
    except smtplib.SMTPRecipientsRefused as exc:
        codes = [code for code, _ in exc.recipients.values()]
        retry = all(400 <= c < 500 for c in codes)
        raise Undeliverable(f"the relay refused {mail.to}: {codes}", retry=retry) from None
    except smtplib.SMTPResponseException as exc:
        raise Undeliverable(
            f"the relay answered {exc.smtp_code} {exc.smtp_error!r}",
            retry=400 <= exc.smtp_code < 500 or exc.smtp_code == 421,
        ) from None
    except (OSError, smtplib.SMTPException) as exc:  # refused, timed out, dropped, TLS
        raise Undeliverable(f"the relay {smtp.host}:{smtp.port}: {exc}", retry=True) from None


def post_json(url: str, body: dict[str, Any], timeout_s: float) -> None:
    """POST `body` as JSON; any 2xx answer is delivered, else Undeliverable."""
    data = json.dumps(body, separators=(",", ":")).encode()
    request = urllib.request.Request(
        url,
        data=data,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "jpushare-notify/1"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            answer.read(65536)
    except urllib.error.HTTPError as exc:
        retry = exc.code >= 500 or exc.code in (408, 429)
        raise Undeliverable(f"the webhook answered {exc.code}", retry=retry) from None
    except (OSError, ValueError) as exc:  # refused, timed out, a bad answer
        raise Undeliverable(f"the webhook: {exc}", retry=True) from None
