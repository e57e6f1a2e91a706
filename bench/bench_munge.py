"""Benchmark of MUNGE sign-in: one credential made and decoded, libmunge vs the commands.

What a request signed with MUNGE costs: the client encodes one credential per request and
the service decodes it (munged checks signature, TTL and replay). Both backends talk to the
same local munged; the commands pay a process start each. Prints the median and p95 in
milliseconds of encode, decode, and one request signed in through the API (TestClient,
SQLite, libmunge); asserts nothing. Needs a running munged.

Run: `.venv/bin/python bench/bench_munge.py [--n 300]`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from jpushare.munge import LibMunge, Munge, MungeCommands, request_payload


def timed(n: int, step: Callable[[int], object]) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        step(i)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def summary(ms: list[float]) -> str:
    ms = sorted(ms)
    return f"median {statistics.median(ms):7.3f}  p95 {ms[int(len(ms) * 0.95)]:7.3f}"


def backend(name: str, munge: Munge, n: int) -> None:
    payload = request_payload("GET", "/v1/jobs", "mine=true")
    encode = timed(n, lambda _i: munge.encode(payload))
    creds = [munge.encode(payload) for _ in range(n)]
    decode = timed(n, lambda i: munge.decode(creds[i]))
    print(f"{name:10s} encode {summary(encode)}   decode {summary(decode)}")


def api_round_trip(n: int) -> None:
    """GET /v1/labs signed with MUNGE vs with a token, through the whole app."""
    import os
    import pwd

    from fastapi.testclient import TestClient

    from jpushare import store
    from jpushare.api import create_app
    from jpushare.api.munge_auth import MungeSignIn

    munge = LibMunge()
    with tempfile.TemporaryDirectory() as tmp:
        url = store.sqlite_url(Path(tmp) / "bench.sqlite")
        store.upgrade(url)
        engine = store.make_engine(url)
        sessions = store.make_sessionmaker(engine)
        me = pwd.getpwuid(os.geteuid()).pw_name
        with sessions.begin() as s:
            store.create_lab(s, "lab", datetime.now(UTC))
            user = store.create_user(s, "me", "lab", "student", datetime.now(UTC), me)
            token = store.issue_token(s, user.id, datetime.now(UTC)).secret
        app = create_app(sessions, munge=MungeSignIn(munge))
        with TestClient(app) as client:

            def signed(_i: int) -> None:
                cred = munge.encode(request_payload("GET", "/v1/labs"))
                r = client.get("/v1/labs", headers={"Authorization": f"MUNGE {cred}"})
                assert r.status_code == 200, r.text

            def bearer(_i: int) -> None:
                r = client.get("/v1/labs", headers={"Authorization": f"Bearer {token}"})
                assert r.status_code == 200, r.text

            signed(0)
            bearer(0)
            print(f"GET /v1/labs, MUNGE (encode + request)  {summary(timed(n, signed))}")
            print(f"GET /v1/labs, token                     {summary(timed(n, bearer))}")
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300)
    args = parser.parse_args()
    print(f"{args.n} credentials per backend, milliseconds")
    backend("libmunge", LibMunge(), args.n)
    backend("commands", MungeCommands(), max(50, args.n // 3))
    api_round_trip(args.n)


if __name__ == "__main__":
    main()
