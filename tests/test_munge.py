"""`jpushare.munge` against the real munged: both backends encode and decode the same
credentials, and report munged's refusals the same way."""

from __future__ import annotations

import time

import pytest

from jpushare.munge import (
    UNAVAILABLE_STATUSES,
    LibMunge,
    Munge,
    MungeCommands,
    MungeError,
    MungeStatus,
    default_munge,
    request_payload,
)
from tests.unix_accounts import require_root_and_munge

BACKENDS = [pytest.param(LibMunge, id="libmunge"), pytest.param(MungeCommands, id="commands")]


@pytest.fixture(autouse=True)
def _munged() -> None:
    require_root_and_munge()


@pytest.mark.parametrize("encoder", BACKENDS)
@pytest.mark.parametrize("decoder", BACKENDS)
def test_a_credential_decodes_once_with_its_payload_uid_and_time(
    encoder: type[Munge], decoder: type[Munge]
) -> None:
    import os

    payload = request_payload("POST", "/v1/jobs", "", b'{"command": "true"}')
    before = int(time.time())
    credential = encoder().encode(payload)
    decoded = decoder().decode(credential)
    assert decoded.payload == payload and decoded.uid == os.geteuid()
    assert before <= decoded.encoded_at.timestamp() <= time.time() + 1
    with pytest.raises(MungeError) as exc:
        decoder().decode(credential)
    assert exc.value.status == MungeStatus.CRED_REPLAYED
    assert exc.value.message == "Replayed credential"


@pytest.mark.parametrize("backend", BACKENDS)
def test_refusals_carry_munged_s_reason(backend: type[Munge]) -> None:
    munge = backend()
    short = munge.encode(b"", ttl_s=1)
    time.sleep(2.1)
    with pytest.raises(MungeError) as exc:
        munge.decode(short)
    assert (exc.value.status, exc.value.message) == (MungeStatus.CRED_EXPIRED, "Expired credential")
    for junk in ("garbage", "MUNGE:AAAA:", " ", "x" * 5000, "caf\u00e9"):
        with pytest.raises(MungeError) as exc:
            munge.decode(junk)
        # a bad credential (format, version, MAC...), not "munged is down" (a 503 upstream)
        assert exc.value.status not in UNAVAILABLE_STATUSES, junk
        assert exc.value.status not in (MungeStatus.CRED_EXPIRED, MungeStatus.CRED_REPLAYED)


def test_the_payload_names_the_request_and_its_body() -> None:
    a = request_payload("get", "/v1/jobs", "mine=true")
    assert a.startswith(b"jpushare-v1 GET /v1/jobs?mine=true sha256=")
    assert a != request_payload("GET", "/v1/jobs", "mine=false")
    assert request_payload("POST", "/v1/jobs", body=b"1") != request_payload(
        "POST", "/v1/jobs", body=b"2"
    )


def test_the_library_is_preferred_when_it_loads() -> None:
    assert isinstance(default_munge(), LibMunge)
