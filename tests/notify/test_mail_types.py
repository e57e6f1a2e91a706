"""sbatch's --mail-type words and --mail-user addresses, as the CLI, API and notifier read them."""

from __future__ import annotations

import pytest

from jpushare.mail_types import (
    MailType,
    check_mail_address,
    mail_types_text,
    parse_mail_types,
    stored_mail_types,
)

B, E, F, R = MailType.BEGIN, MailType.END, MailType.FAIL, MailType.REQUEUE


@pytest.mark.parametrize(
    ("text", "types", "skipped"),
    [
        ("ALL", {B, E, F, R}, []),
        ("end,fail", {E, F}, []),
        ("BEGIN, END", {B, E}, []),
        ("NONE", set(), []),
        ("END,TIME_LIMIT_80", {E}, ["TIME_LIMIT_80"]),
        ("END,ARRAY_TASKS", {E, MailType.ARRAY_TASKS}, []),  # how, not a mail: not in ALL
        ("ALL,INVALID_DEPEND", {B, E, F, R}, ["INVALID_DEPEND"]),
    ],
)
def test_mail_types_read_as_sbatch(text: str, types: set[MailType], skipped: list[str]) -> None:
    assert parse_mail_types(text) == (frozenset(types), skipped)


@pytest.mark.parametrize("text", ["", "END,BOGUS", "NONE,END", ","])
def test_words_sbatch_does_not_know_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="mail-type"):
        parse_mail_types(text)


def test_stored_form_round_trips_in_a_fixed_order() -> None:
    assert mail_types_text({R, B}) == "BEGIN,REQUEUE"
    assert stored_mail_types("BEGIN,REQUEUE,LATER_TYPE") == {B, R}
    assert stored_mail_types(None) == frozenset()


@pytest.mark.parametrize("address", ["alice@example.org", "a.b+tag@mail.uni-x.de", "x@localhost"])
def test_one_address_is_taken(address: str) -> None:
    assert check_mail_address(address) == address


@pytest.mark.parametrize(
    "address",
    [
        "alice",
        "alice@",
        "a@b.org, eve@evil.org",  # two recipients
        "a@b.org\r\nBcc: eve@evil.org",  # a second header line
        "Alice <a@b.org>",
        "a b@c.org",
        "x" * 250 + "@b.org",
    ],
)
def test_anything_but_one_plain_address_is_refused(address: str) -> None:
    with pytest.raises(ValueError, match="one mail address"):
        check_mail_address(address)
